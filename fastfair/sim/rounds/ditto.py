"""Ditto in the simulator (:mod:`fastfair.methods.ditto` holds the method): the cohort trains as
``[m, P]`` rows, the global copies and the personal models side by side through one forward and
backward pass per minibatch; the server averages the global updates with FedAvg weights and the
server optimiser takes the step. A client's personal model lives in a ``[K, P]`` table, starting
at the initial global model."""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np
import torch

from fastfair import ops
from fastfair._options import check_options
from fastfair.methods import method_options
from fastfair.methods.ditto import DittoOptions, personal_step
from fastfair.sim.data.base import ClientBatch
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.rounds.build import RulePlan
from fastfair.sim.rounds.runner import MethodRunner
from fastfair.sim.rounds.superfed import evaluate_personal, padded
from fastfair.sim.seeding import Stream, torch_seed
from fastfair.sim.training.schedule import LocalTrainingConfig, masked_mean, minibatch_schedule


def ditto_options(options: Dict[str, Any]) -> DittoOptions:
    """Ditto's options from ``rule_options`` (ValueError naming an unknown one)."""
    check_options("rule 'ditto'", options, method_options("ditto"))
    return DittoOptions(**options)


class DittoSimulation(MethodRunner):
    """Ditto rounds on any federated data set and flat model of the simulator."""

    flat_rows_only = ("ditto trains models without buffers (batch norm) on one label per "
                      "sample: its personal models are flat parameter rows")

    unused = {"device": "Ditto runs on the CPU", "precision": "Ditto trains in fp32",
              "train_loss": "Ditto reports train_loss every round",
              "validation": "Ditto's lambda is not chosen on a validation split",
              "fair_over": "it is a method with its own server step, not a weighting rule; "
                           "run a rule over groups",
              "objective": "Ditto's clients minimise their loss and its proximal personal "
                           "objective",
              "objective_options": "Ditto's clients minimise their loss and its proximal "
                                   "personal objective"}
    model: FlatModel  # _model builds one for every run

    @classmethod
    def resolve(cls, config: Any) -> RulePlan:
        ditto_options(dict(config.rule_options))
        return RulePlan(config, rule=False)

    def _build(self, plan: RulePlan) -> None:
        self.opts = ditto_options(dict(self.config.rule_options))
        self.plan = plan
        self.optimizer = plan.optimizer()

    def _setup(self) -> None:
        self.personal = self.params.reshape(1, -1).repeat(self.config.clients, 1)
        self._eval = padded(self._pick_eval_clients(self.dataset))
        self._last: Dict[str, float] = {}

    # ------------------------------------------------------------------ one round
    def client_updates(self, ids: np.ndarray, batch: ClientBatch, t: int
                       ) -> Tuple[torch.Tensor, torch.Tensor, float]:
        """Algorithm 1's client part for the cohort ``ids`` from the global model ``w^t``:
        returns the trained global copies ``[m, P]``, the new personal models ``[m, P]`` and
        the mean first-minibatch loss of the global copies."""
        cfg, m = self.config, len(ids)
        w = self.params.reshape(1, -1)
        f = w.repeat(m, 1)
        v = self.personal[torch.as_tensor(ids)].clone()
        local = LocalTrainingConfig(epochs=cfg.epochs, steps=cfg.local_steps,
                                    batch_size=cfg.batch_size, lr=cfg.client_lr(t))
        first_loss = None
        schedule = minibatch_schedule(batch.counts, local, ids,
                                      torch_seed(cfg.seed, Stream.ROUND_TRAINING, t))
        for take, valid in schedule:
            # Both models of a client on the same minibatch: one pass over [2m, P] rows.
            leaf = torch.cat([f, v]).requires_grad_(True)
            x, y = batch.x[take], batch.y[take]
            logits = self.model.forward(leaf, torch.cat([x, x]))
            per_sample = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), torch.cat([y, y]).reshape(-1),
                reduction="none").reshape(2 * m, -1)
            loss = masked_mean(per_sample, torch.cat([valid, valid]).to(per_sample.dtype))
            (grad,) = torch.autograd.grad(loss.sum(), leaf)
            if first_loss is None:
                first_loss = float(loss[:m].detach().mean())
            active = valid.any(1, keepdim=True).to(f.dtype)   # a client done with its steps rests
            with torch.no_grad():
                f = f - active * local.lr * grad[:m]
                v = v + active * (personal_step(v, grad[m:], w, self.opts.lam, local.lr) - v)
        return f, v, float(first_loss if first_loss is not None else float("nan"))

    def _play(self, t: int, ids: np.ndarray) -> Dict[str, Any]:
        """Round t: the cohort's updates, then the server optimiser's step on the FedAvg of the
        global copies' pseudo-gradients."""
        batch = self.dataset.client_data(ids, "train")
        f, v, loss = self.client_updates(ids, batch, t)
        self.personal[torch.as_tensor(ids)] = v
        counts = batch.counts.astype(np.float64)
        direction = ops.weighted_average(self.params.reshape(1, -1) - f, counts / counts.sum())
        self.optimizer.step(self.params, direction)
        return {"participants": int(ids.shape[0]), "train_loss": loss}

    # ------------------------------------------------------------------ evaluation
    def _evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per evaluation client: accuracy, loss and test count of its personal model on its
        own test data; ``acc_global`` (an extra metric) is the global model's count-weighted
        accuracy on the same clients."""
        x, y, valid = self._eval
        counts = valid.sum(1).numpy()
        keep = counts > 0
        loss, acc = evaluate_personal(self.model, self.personal[torch.as_tensor(self.eval_ids)],
                                      x, y, valid)
        _, acc_global = evaluate_personal(
            self.model, self.params.reshape(1, -1).repeat(len(self.eval_ids), 1), x, y, valid)
        w = counts[keep] / counts[keep].sum()
        self._last = {"acc_global": float(acc_global[keep] @ w)}
        return acc[keep], loss[keep], counts[keep]

    def extra_metrics(self) -> Dict[str, float]:
        return dict(self._last)

    # ------------------------------------------------------------------ checkpoints
    def _state(self) -> Dict[str, Any]:
        return {"params": self.params.clone(), "personal": self.personal.clone(),
                "optimizer": self.optimizer.state_dict()}

    def _load(self, state: Dict[str, Any]) -> None:
        params = self._checked(state, "params", self.params)
        personal = self._checked(state, "personal", self.personal)
        optimizer = self.plan.optimizer()
        optimizer.load_state_dict(state["optimizer"])
        self.params, self.personal, self.optimizer = params, personal, optimizer
