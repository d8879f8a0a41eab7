"""SuPerFed-MM / -LM in the simulator (:mod:`fastfair.methods.superfed` holds the method): the
whole cohort trains at once as ``[m, P]`` rows; per minibatch one backward pass gives the
gradient at the mixed models, and two fused passes (:func:`fastfair.ops.superfed_reduce`,
:func:`fastfair.ops.superfed_step`) do everything else. The server averages the federated models
with FedAvg weights and the server optimiser takes the step.
"""

from __future__ import annotations

from typing import Any, Dict, Tuple

import numpy as np
import torch

from fastfair import ops
from fastfair._options import check_options
from fastfair.methods import method_options
from fastfair.methods.superfed import SuperFedOptions, draw_lambdas, initial_local_model
from fastfair.sim.data.base import ClientBatch
from fastfair.sim.models.flat import FlatModel
from fastfair.sim.rounds.build import RulePlan
from fastfair.sim.rounds.runner import MethodRunner
from fastfair.sim.seeding import Stream, numpy_rng, torch_seed
from fastfair.sim.training.schedule import LocalTrainingConfig, masked_mean, minibatch_schedule


def superfed_options(rule: str, options: Dict[str, Any]) -> SuperFedOptions:
    """The options of ``rule`` (``superfed-mm`` / ``superfed-lm``, which sets ``mode``)."""
    check_options(f"rule {rule!r}", options, method_options(rule))
    return SuperFedOptions(**options, mode=rule.rsplit("-", 1)[1])


def padded(batch: ClientBatch) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(x [m, n_max, F], y [m, n_max], valid [m, n_max])`` of a ragged client batch."""
    counts = torch.as_tensor(batch.counts)
    n = int(counts.max()) if len(counts) else 0
    pos = torch.arange(n)
    valid = pos[None, :] < counts[:, None]
    rows = (torch.as_tensor(batch.offsets[:-1])[:, None] + pos[None, :]).clamp(
        max=max(batch.x.shape[0] - 1, 0))
    return batch.x[rows], batch.y[rows], valid


def evaluate_personal(model: FlatModel, params: torch.Tensor, x: torch.Tensor, y: torch.Tensor,
                      valid: torch.Tensor) -> Tuple[np.ndarray, np.ndarray]:
    """Loss and accuracy of client k's own model ``params[k]`` on its own padded samples."""
    with torch.no_grad():
        logits = model.forward(params, x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                 y.reshape(-1), reduction="none").reshape(y.shape)
        hit = (logits.argmax(-1) == y).double()
        n = valid.sum(1).double().clamp(min=1)
        v = valid.double()
        return ((loss.double() * v).sum(1) / n).numpy(), ((hit * v).sum(1) / n).numpy()


class SuperFedSimulation(MethodRunner):
    """SuPerFed rounds on any federated data set and flat model of the simulator."""

    flat_rows_only = ("superfed mixes models without buffers (batch norm) trained on one "
                      "label per sample")

    unused = {"device": "SuPerFed runs on the CPU", "precision": "SuPerFed trains in fp32",
              "train_loss": "SuPerFed reports train_loss every round",
              "validation": "SuPerFed's options are not chosen on a validation split",
              "fair_over": "it is a method with its own server step, not a weighting rule; "
                           "run a rule over groups",
              "objective": "SuPerFed's clients minimise its own mixed-model loss",
              "objective_options": "SuPerFed's clients minimise its own mixed-model loss",
              "eval_average_iterates": "SuPerFed evaluates its personalised mixtures"}
    model: FlatModel  # _model builds one for every run

    @classmethod
    def resolve(cls, config: Any) -> RulePlan:
        superfed_options(config.rule, dict(config.rule_options))
        return RulePlan(config, rule=False)

    def _build(self, plan: RulePlan) -> None:
        self.opts = superfed_options(self.config.rule, dict(self.config.rule_options))
        self.plan = plan
        self.optimizer = plan.optimizer()

    def _setup(self) -> None:
        self.layout = ops.SegmentLayout.from_shapes(self.model.shapes)
        self.local = torch.zeros(self.config.clients, self.params.numel())
        self.has_local = np.zeros(self.config.clients, dtype=bool)
        self._eval = padded(self._pick_eval_clients(self.dataset))
        self._last: Dict[str, float] = {}

    # ------------------------------------------------------------------ state
    def local_models(self, ids: np.ndarray) -> torch.Tensor:
        """Clients' local models ``[len(ids), P]``; a client's first use draws it (Xavier-normal
        weights from its own seed, zero shared layers, as the reference code initialises)."""
        fresh = np.unique(ids[~self.has_local[ids]])
        for k in fresh.tolist():
            g = torch.Generator().manual_seed(torch_seed(self.config.seed,
                                                         Stream.SUPERFED_LOCAL_INIT, k))
            self.local[k] = initial_local_model(self.model.shapes, self.layout, g)
            self.has_local[k] = True
        return self.local[torch.as_tensor(ids)]

    def _lambdas(self, rng: np.random.Generator, m: int, mixing: bool) -> np.ndarray:
        return draw_lambdas(rng, m, self.layout.num_segments, self.opts.mode, mixing)

    # ------------------------------------------------------------------ one round
    def client_updates(self, ids: np.ndarray, batch: ClientBatch, t: int
                       ) -> Tuple[torch.Tensor, torch.Tensor, float]:
        """Alg. 2.3 for the cohort: returns the trained ``(f [m, P], l [m, P])`` and the mean
        first-minibatch loss."""
        cfg, o = self.config, self.opts
        m = len(ids)
        mixing = t > int(o.start * cfg.rounds)
        f = self.params.reshape(1, -1).repeat(m, 1)
        l = self.local_models(ids).clone()
        buf_f, buf_l = torch.zeros_like(f), torch.zeros_like(f)
        rng = numpy_rng(cfg.seed, Stream.SUPERFED_LAMBDA, t)
        lam = self._lambdas(rng, m, mixing)
        mixed = ops.superfed_mix(f, l, lam, self.layout)
        round_seed = torch_seed(cfg.seed, Stream.ROUND_TRAINING, t)
        local = LocalTrainingConfig(epochs=cfg.epochs, steps=cfg.local_steps,
                                    batch_size=cfg.batch_size, lr=cfg.client_lr(t))
        first_loss = None
        assert o.nu is not None  # its __post_init__ sets the mode's default
        nu = o.nu if mixing else 0.0
        for take, valid in minibatch_schedule(batch.counts, local, ids, round_seed):
            leaf = mixed.detach().requires_grad_(True)
            logits = self.model.forward(leaf, batch.x[take])
            per_sample = torch.nn.functional.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), batch.y[take].reshape(-1),
                reduction="none").reshape(take.shape)
            loss = masked_mean(per_sample, valid.to(per_sample.dtype))
            (grad,) = torch.autograd.grad(loss.sum(), leaf)
            if first_loss is None:
                first_loss = float(loss.detach().mean())
            if nu > 0 or (o.prox == "reference_code" and o.mu > 0):
                reduced = ops.superfed_reduce(f, l, self.params, self.layout)
            else:
                reduced = np.zeros((m, self.layout.num_segments, 4))
            lam_next = self._lambdas(rng, m, mixing)
            ops.superfed_step(f, l, self.params, grad, layout=self.layout, lam=lam,
                              lam_next=lam_next, mixed=mixed, buf_f=buf_f, buf_l=buf_l,
                              prox=ops.prox_coefficients(reduced, self.layout, o.mu, o.prox),
                              orth=ops.orthogonality_coefficients(reduced, self.layout, nu),
                              lr=local.lr, momentum=o.momentum, weight_decay=o.weight_decay,
                              train_local=mixing, active=valid.any(1).numpy())
            lam = lam_next
        return f, l, float(first_loss if first_loss is not None else float("nan"))

    def _play(self, t: int, ids: np.ndarray) -> Dict[str, Any]:
        """Round t: cohort update, then the server optimiser's step on the FedAvg of the
        federated models' pseudo-gradients."""
        cfg = self.config
        batch = self.dataset.client_data(ids, "train")
        f, l, loss = self.client_updates(ids, batch, t)
        self.local[torch.as_tensor(ids)] = l
        counts = batch.counts.astype(np.float64)
        direction = ops.weighted_average(self.params.reshape(1, -1) - f, counts / counts.sum())
        self.optimizer.step(self.params, direction)
        return {"participants": int(ids.shape[0]), "train_loss": loss,
                "mixing": int(t > int(self.opts.start * cfg.rounds))}

    # ------------------------------------------------------------------ evaluation
    def evaluate_grid(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(lambdas [G], accuracy [G, E], loss [G, E])`` of the personalised models
        :math:`\\theta(\\lambda)` of the evaluation clients on their test data."""
        x, y, valid = self._eval
        E = len(self.eval_ids)
        g = self.params.reshape(1, -1).repeat(E, 1)
        l = self.local_models(self.eval_ids)
        lams = np.linspace(0.0, 1.0, self.opts.grid)
        accs, losses = [], []
        for lam in lams:
            mixed = ops.superfed_mix(g, l, np.full(E, lam), self.layout)
            loss, acc = evaluate_personal(self.model, mixed, x, y, valid)
            accs.append(acc)
            losses.append(loss)
        return lams, np.array(accs), np.array(losses)

    def _evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per evaluation client: accuracy, loss and test count at the lambda of the grid with the
        best count-weighted mean accuracy (the personalised accuracy the thesis reports)."""
        lams, acc, loss = self.evaluate_grid()
        counts = valid_counts = self._eval[2].sum(1).numpy()
        keep = valid_counts > 0
        w = counts[keep] / counts[keep].sum()
        means = acc[:, keep] @ w
        best = int(np.argmax(means))
        self._last = {"best_lambda": float(lams[best]), "acc_global": float(means[0]),
                      "acc_local": float(means[-1])}
        return acc[best, keep], loss[best, keep], counts[keep]

    def extra_metrics(self) -> Dict[str, float]:
        return dict(self._last)

    # ------------------------------------------------------------------ checkpoints
    def _state(self) -> Dict[str, Any]:
        return {"params": self.params.clone(), "local": self.local.clone(),
                "has_local": self.has_local.copy(), "optimizer": self.optimizer.state_dict()}

    def _load(self, state: Dict[str, Any]) -> None:
        params = self._checked(state, "params", self.params)
        local = self._checked(state, "local", self.local)
        has_local = self._checked(state, "has_local", self.has_local)
        optimizer = self.plan.optimizer()
        optimizer.load_state_dict(state["optimizer"])
        self.params, self.local, self.has_local, self.optimizer = (params, local, has_local,
                                                                   optimizer)
