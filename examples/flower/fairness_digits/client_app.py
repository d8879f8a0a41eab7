"""The ClientApp: trains the received model one epoch on the client's partition, on the
objective of the server's rule, and reports its loss of the received model."""

from __future__ import annotations

import torch
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from fairness_digits.task import new_model, partitions, quiet_flower, setting
from fastfair.integrations.flwr import RECEIVED_LOSS_KEY, ClientObjective

app = ClientApp()


@app.train()
def train(msg: Message, context: Context) -> Message:
    """Reports the loss of the received model (before training, under RECEIVED_LOSS_KEY; not
    Flower's train_loss, the mean loss during training) and the client's id (its partition,
    which the strategy reads as the client id and leaves out of the averaged metrics), then
    trains one epoch on the objective of the server's rule (plain, FedProx, PropFair or
    Fed-CVaR-Avg)."""
    run = context.run_config
    quiet_flower(setting(run, "verbose", bool))
    lr, batch = setting(run, "lr", float), setting(run, "batch-size", int)
    seed = setting(run, "seed", int)
    pid = int(context.node_config["partition-id"])
    x, y, _, _ = partitions(int(context.node_config["num-partitions"]),
                            setting(run, "alpha", float), seed)[pid]
    model = new_model(seed)
    model.load_state_dict(msg.content["arrays"].to_torch_state_dict())
    received = [p.detach().clone() for p in model.parameters()]
    objective = ClientObjective.from_config(msg.content["config"])
    with torch.no_grad():
        loss_before = float(torch.nn.functional.cross_entropy(model(x), y))

    # Fed-CVaR-Avg trains a threshold t beside the model, with its own step size.
    start = objective.initial_state()
    state = None if start is None else torch.tensor(start, requires_grad=True)
    groups = [{"params": list(model.parameters())}]
    if state is not None:
        groups.append({"params": [state], "lr": objective.state_lr(lr)})
    opt = torch.optim.SGD(groups, lr=lr)
    order = torch.randperm(len(y), generator=torch.Generator().manual_seed(pid))
    for first in range(0, len(y), batch):
        idx = order[first:first + batch]
        batch_loss = torch.nn.functional.cross_entropy(model(x[idx]), y[idx])
        loss = objective(batch_loss, list(model.parameters()), received, state)
        opt.zero_grad()
        loss.backward()
        opt.step()

    metrics = {"num-examples": len(y), RECEIVED_LOSS_KEY: loss_before, "partition-id": pid,
               **objective.reply_metrics(state)}
    content = RecordDict({"arrays": ArrayRecord(model.state_dict()),
                          "metrics": MetricRecord(metrics)})
    return Message(content=content, reply_to=msg)
