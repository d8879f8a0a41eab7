"""FedEvg in the simulator (:mod:`fastfair.methods.fedevg` holds the algorithm): rounds over a
federated data set whose features lie in [0, 1] (``digits``), evaluated by the server classifier
trained on the synthetic set."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, Optional, Tuple

import numpy as np
import torch

from fastfair import ops
from fastfair._options import check_options
from fastfair.methods import method_options
from fastfair.methods.fedevg import FedEvgOptions, client_update, server_classifier
from fastfair.sim.data.base import FederatedDataset
from fastfair.sim.rounds.runner import MethodRunner
from fastfair.sim.seeding import Stream, torch_seed

if TYPE_CHECKING:
    from fastfair.sim.models.flat import FlatModel

_OWN = "FedEvg has its own (see --rule-option, fastfair.methods.fedevg.FedEvgOptions)"


def fedevg_options(options: Dict[str, Any]) -> FedEvgOptions:
    """``FedEvgOptions(**options)``, names and types checked first."""
    check_options("rule 'fedevg'", options, method_options("fedevg"))
    return FedEvgOptions(**options)


class FedEvgSimulation(MethodRunner):
    """FedEvg rounds (Alg. 4.1) over a federated data set with features in [0, 1]."""

    unused = {"model": f"the model is an energy classifier; {_OWN}: hidden",
              "hidden": f"{_OWN}: hidden", "epochs": f"{_OWN}: local_epochs",
              "local_steps": f"{_OWN}: local_epochs", "batch_size": f"{_OWN}: batch_size",
              "lr": f"{_OWN}: lr", "lr_decay": f"{_OWN}: lr_decay, lr_decay_every",
              "lr_schedule": f"{_OWN}: lr_decay, lr_decay_every",
              "server_lr": f"the server step is Langevin; {_OWN}: beta_start, beta_end",
              "server_optimizer": "the server moves a synthetic set, not a model",
              "server_options": "the server moves a synthetic set, not a model",
              "device": "FedEvg runs on the CPU",
              "eval_average_iterates": "the server moves a synthetic set, not a model",
              "precision": "FedEvg trains in fp32",
              "train_loss": "FedEvg reports train_loss every round",
              "validation": "FedEvg's options are not chosen on a validation split",
              "fair_over": "it is a method with its own server step, not a weighting rule; "
                           "run a rule over groups",
              "objective": "FedEvg's clients train an energy model of their own form",
              "objective_options": "FedEvg's clients train an energy model of their own form"}

    takes_model = False

    @classmethod
    def resolve(cls, config: Any) -> FedEvgOptions:
        return fedevg_options(dict(config.rule_options))

    def _build(self, plan: FedEvgOptions) -> None:
        self.opts = plan

    def _dataset(self, dataset: Optional[FederatedDataset]) -> FederatedDataset:
        if dataset is None and self.config.dataset != "digits":
            raise ValueError("fedevg synthesises inputs in [0, 1]; run it with --dataset digits")
        return super()._dataset(dataset)

    def _model(self, model: Optional[FlatModel]) -> None:  # takes_model: always None here
        return None  # the global model is the classifier trained on the synthetic set

    def _setup(self) -> None:
        o, config = self.opts, self.config
        L, D = self.dataset.num_classes, self.dataset.num_features
        self.labels = torch.arange(L).repeat_interleave(o.spc)   # the code's balanced labels
        g = torch.Generator().manual_seed(torch_seed(config.seed, Stream.FEDEVG_SYNTHETIC_INIT))
        self.synthetic = torch.randn(L * o.spc, D, generator=g)  # eq. 4.12: x ~ N(0, I)
        assert o.beta_end is not None  # FedEvgOptions.__post_init__ sets the variant's value
        self.betas = ops.cosine_beta_schedule(config.rounds, o.beta_start, o.beta_end)
        self._eval_batch = self._pick_eval_clients(self.dataset)

    def client_update(self, client: int, x: torch.Tensor, y: torch.Tensor, t: int
                      ) -> Tuple[torch.Tensor, torch.Tensor, float]:
        """:func:`fastfair.methods.fedevg.client_update` of ``client`` at round ``t``."""
        key = torch_seed(self.config.seed, Stream.FEDEVG_CLIENT, client, round=t)
        return client_update(x, y, self.synthetic, self.labels, self.dataset.num_classes,
                             self.opts, key, t)

    def _play(self, t: int, ids: np.ndarray) -> Dict[str, Any]:
        """Round t (Alg. 4.1)."""
        o, cfg = self.opts, self.config
        batch = self.dataset.client_data(ids, "train")
        es, Gs, losses = [], [], []
        for k, client in enumerate(ids.tolist()):
            rows = slice(int(batch.offsets[k]), int(batch.offsets[k + 1]))
            e, G, loss = self.client_update(client, batch.x[rows], batch.y[rows], t)
            es.append(e)
            Gs.append(G)
            losses.append(loss)
        beta = float(self.betas[t - 1])
        ops.fedevg_server_step(self.synthetic, torch.stack(Gs), torch.stack(es),
                               batch.counts.astype(np.float64), step=beta,
                               noise_std=o.server_noise,
                               seed=torch_seed(cfg.seed, Stream.FEDEVG_SERVER_NOISE, t),
                               offset=0, clamp=(0.0, 1.0) if o.server_clamp else None)
        return {"participants": int(ids.shape[0]), "train_loss": float(np.mean(losses)),
                "beta": beta}

    def server_classifier(self) -> torch.nn.Module:
        """The global model: :func:`fastfair.methods.fedevg.server_classifier` of the current
        synthetic set."""
        return server_classifier(self.synthetic, self.labels, self.dataset.num_classes, self.opts,
                                 torch_seed(self.config.seed, Stream.FEDEVG_EVAL))

    def _evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(accuracy, loss, test counts)`` per evaluation client of the server classifier."""
        net = self.server_classifier()
        b = self._eval_batch
        with torch.no_grad():
            logits = net(b.x)
            loss = torch.nn.functional.cross_entropy(logits, b.y, reduction="none").double()
            hit = (logits.argmax(1) == b.y).double()
        seg = torch.repeat_interleave(torch.arange(len(b.counts)), torch.as_tensor(b.counts))
        counts = b.counts
        keep = counts > 0
        n = np.maximum(counts, 1).astype(np.float64)
        loss_c = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, seg, loss).numpy() / n
        acc_c = torch.zeros(len(counts), dtype=torch.float64).index_add_(0, seg, hit).numpy() / n
        return acc_c[keep], loss_c[keep], counts[keep]

    def global_state_dict(self) -> Dict[str, torch.Tensor]:
        """The server classifier's ``state_dict`` (FedEvg's global model)."""
        return self.server_classifier().state_dict()

    def extra_metrics(self) -> Dict[str, float]:
        return {"synthetic_mean": float(self.synthetic.mean()),
                "synthetic_std": float(self.synthetic.std())}

    def _state(self) -> Dict[str, Any]:
        return {"synthetic": self.synthetic.clone()}

    def _load(self, state: Dict[str, Any]) -> None:
        self.synthetic = self._checked(state, "synthetic", self.synthetic)
