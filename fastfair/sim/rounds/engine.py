"""The simulation engine: one object that runs federated rounds of any fastfair rule.

A round samples a cohort (an availability model), lets every sampled client report the loss of
the received model on its training data where the rule or the record needs it
(:meth:`Simulation.needs_received_loss`), trains the cohort in one batched pass on the client
objective (the rule's own, or the configuration's), asks the rule for mixing coefficients,
averages the updates with them, and lets the server optimiser step (weights -> weighted_average
-> all-reduce -> step). A cohort that repeats (full participation) trains on the batch it had,
unless its data set draws fresh samples per call (``FederatedDataset.fixed_data``). Under
``torch.distributed`` each process trains a slice of the cohort; one all-reduce sums them.

All randomness derives from (seed, round, client id) through :mod:`fastfair.sim.seeding`, so a
run resumed from a checkpoint, or run on any number of processes, makes the same choices as an
uninterrupted single-process run.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
import torch

from fastfair import ops
from fastfair.aggregators.bounds import UpdateBound
from fastfair.aggregators.compose import round_objective
from fastfair.aggregators.objectives import ClientObjective
from fastfair.sim.config import SimulationConfig
from fastfair.sim.data.base import ClientBatch, FederatedDataset, concat_batches
from fastfair.sim.data.validation import with_validation
from fastfair.sim.distributed import Distributed, check_device
from fastfair.sim.models.flat import FlatModel, check_model
from fastfair.sim.reporting.metrics import mixture_summary
from fastfair.sim.reporting.stats import DIVERGED
from fastfair.sim.rounds.build import RulePlan
from fastfair.sim.rounds.runner import Runner
from fastfair.sim.seeding import CohortKeys, Stream, torch_seed
from fastfair.sim.training.alone import fold_in_order
from fastfair.sim.training.evaluate import class_scores, evaluate_clients, logit_margins
from fastfair.sim.training.lanes import Lane
from fastfair.sim.training.local import train_lanes
from fastfair.sim.training.precision import check_precision
from fastfair.sim.training.schedule import LocalTrainingConfig, longest_first


class Simulation(Runner):
    """A federated run of one rule: ``step()`` plays one round, ``evaluate()`` scores the global
    model on the evaluation clients, ``state_dict()`` captures everything needed to continue.
    Several runs on one model play their rounds as one batched program through
    :meth:`play_round` (a sweep, :class:`~fastfair.sim.experiments.sweep.Sweep`); a run alone
    is its one lane."""

    plays_batched = True

    model: FlatModel  # Runner._model builds one for every run (model_for)
    val_ids: Optional[np.ndarray]
    _eval_batch: ClientBatch
    _val_batch: Optional[ClientBatch]

    def __init__(self, config: SimulationConfig, dist: Optional[Distributed] = None, *,
                 dataset: Optional[FederatedDataset] = None,
                 model: Optional[FlatModel] = None,
                 evaluate_like: Optional["Simulation"] = None, plan: Optional[RulePlan] = None
                 ) -> None:
        """``dataset`` and ``model`` as for :class:`~fastfair.sim.rounds.runner.Runner`. With
        ``config.validation`` > 0 the clients train on the rest of their training data and
        evaluation rounds also score the held-out part (``val_*`` metrics). ``evaluate_like``,
        a run on the same data set object with the same seed and evaluation settings, lends
        this run its evaluation data instead of building them again (a sweep's runs).
        ``plan``: :meth:`validate`'s for ``config`` (None: resolved here)."""
        self._evaluate_like = evaluate_like
        super().__init__(config, dist, dataset=dataset, model=model, plan=plan)

    def _process(self, dist: Optional[Distributed]) -> Distributed:
        cfg = self.config
        dist = dist or Distributed(device=torch.device(cfg.device))
        self.device = dist.device if dist.world_size > 1 else torch.device(cfg.device)
        check_device(self.device)
        check_precision(cfg.precision, self.device)
        return dist

    @classmethod
    def resolve(cls, config: SimulationConfig) -> RulePlan:
        return RulePlan(config)

    def _build(self, plan: RulePlan) -> None:
        self.plan = plan
        self.optimizer = plan.optimizer()

    def _dataset(self, dataset: Optional[FederatedDataset]) -> FederatedDataset:
        return with_validation(super()._dataset(dataset), self.config.validation)

    def _setup(self) -> None:
        self.rule = self.plan.rule(self.dataset)  # over groups, the data set's
        # With eval_average_iterates: the float64 running mean of the global models after each
        # server step so far, and their number (eval_params).
        self._average: Optional[torch.Tensor] = None
        self._averaged = 0
        # (ids, batch) of the last cohort this run generated, when its data are fixed.
        self._last_train: Optional[Tuple[np.ndarray, ClientBatch]] = None
        other, config = self._evaluate_like, self.config
        self.objective = self.plan.objective
        del self._evaluate_like
        if other is not None and other.dataset is self.dataset and all(
                getattr(other.config, f) == getattr(config, f)
                for f in ("seed", "eval_clients", "validation", "device")):
            self.eval_ids, self.val_ids = other.eval_ids, other.val_ids
            self._eval_batch, self._val_batch = other._eval_batch, other._val_batch
        else:
            self._eval_batch = self._pick_eval_clients(self.dataset, self.device)
            self._val_batch, self.val_ids = self._validation_batch()
        self._check_model(self._eval_batch)

    def _validation_batch(self) -> Tuple[Optional[ClientBatch], Optional[np.ndarray]]:
        """The validation samples of the evaluation clients that have any (None without a
        validation split)."""
        if not self.config.validation:
            return None, None
        batch = self.dataset.client_data(self.eval_ids, "val", self.device)
        has = batch.counts > 0
        if not has.any():
            raise ValueError("no evaluation client has validation samples; raise validation "
                             "(--validation) or --eval-clients")
        if has.all():
            return batch, self.eval_ids
        ids = self.eval_ids[has]
        return self.dataset.client_data(ids, "val", self.device), ids

    def _check_model(self, batch: ClientBatch) -> None:
        """Raises ValueError unless the model maps one sample of ``batch`` to logits of the data
        set's classes (:func:`~fastfair.sim.models.flat.check_model`, on the run's device)."""
        check_model(self.model, self.dataset, self.params, batch.x)

    # ------------------------------------------------------------------ one round
    def _play(self, t: int, ids: np.ndarray) -> Dict[str, Any]:
        return self.play_round([self], t, [ids])[0]

    def _train_batch(self, ids: np.ndarray, device: torch.device) -> ClientBatch:
        """The training data of clients ``ids`` on ``device`` (the run's): the batch of the last
        call again when it asked for the same ids in the same order (kept only from a data set of
        fixed samples), else the data set's ``client_data``. Only the last cohort's batch is
        kept (one round holds it anyway); training only reads it. Checkpoints leave it out: it
        is a function of the ids and the data set, so a run resumed from one makes the same
        batches."""
        last = self._last_train
        if last is not None and np.array_equal(last[0], ids):
            return last[1]
        self._last_train = None  # dropped first: one cohort's batch in memory, never two
        batch = self.dataset.client_data(ids, "train", device=device)
        if self.dataset.fixed_data:
            self._last_train = (ids.copy(), batch)
        return batch

    def needs_received_loss(self) -> bool:
        """Whether a round computes the received model's loss on each client's training rows
        where training does not report it: the rule weighs by losses (its ``needs_losses``;
        FedAvg, FairAvg, FedProx, FedMGDA, PropFair's default and FedCVaR's default form do not)
        or the configuration asks for the round record's ``train_loss`` (``train_loss``)."""
        return bool(self.rule.needs_losses or self.config.train_loss)

    def _round_inputs(self, objective: Optional[ClientObjective], state: Any,
                      updates: torch.Tensor, m: int) -> Dict[str, Any]:
        """The round inputs the rule declares, for the whole cohort: ``updates`` gathered from
        every process, ``sq_norms`` computed where the updates are, the rest reported by the
        clients' objective."""
        reported = objective.report(state) if objective is not None and state is not None else {}
        inputs: Dict[str, Any] = {}
        for name in self.rule.round_inputs:
            if name == "updates":
                inputs[name] = self.dist.gather_rows(updates, m)
            elif name == "sq_norms":
                inputs[name] = self.dist.gather(updates.double().pow(2).sum(1).cpu().numpy(), m)
            elif name in reported:
                inputs[name] = self.dist.gather(np.asarray(reported[name], dtype=np.float64), m)
            else:
                raise ValueError(f"rule {self.rule.name!r} needs the round input {name!r}, which "
                                 "neither the updates nor its client objective provide")
        return inputs

    @property
    def eval_params(self) -> torch.Tensor:
        r"""``[P]`` the parameters evaluation scores: the global model :math:`w_t` after t
        server steps, or with ``config.eval_average_iterates`` the running average of the
        models after each step, :math:`\bar w_t = \frac1t \sum_{s=1}^t w_s` (the initial
        model :math:`w_0` left out, as AFL's authors average; :math:`w_0` itself before
        the first step), in the dtype of the parameters."""
        if self._average is None:
            return self.params
        return self._average.to(self.params.dtype)

    def _add_iterate(self) -> None:
        r"""Adds the global model after a server step to the running average
        (:attr:`eval_params`): :math:`\bar w_t = \bar w_{t-1} + (w_t - \bar w_{t-1}) / t`,
        in float64; nothing without ``config.eval_average_iterates``."""
        if not self.config.eval_average_iterates:
            return
        self._averaged += 1
        now = self.params.detach().double()
        if self._average is None:
            self._average = now.clone()
        else:
            self._average.add_(now - self._average, alpha=1.0 / self._averaged)

    def _evaluate(self) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
        return _scores(self.model, self.eval_params, self._eval_batch)

    def evaluate_validation(self) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        return None if self._val_batch is None else _scores(self.model, self.eval_params,
                                                            self._val_batch)

    def binary_scores(self) -> Optional[Tuple[np.ndarray, np.ndarray, np.ndarray]]:
        if self.dataset.num_classes != 2 or self.dataset.label_shape != ():
            return None
        batch = self._eval_batch
        return (logit_margins(self.model, self.eval_params, batch), batch.y.cpu().numpy(),
                batch.offsets)

    def class_scores(self) -> Optional[
            Tuple[Optional[np.ndarray], np.ndarray, np.ndarray, np.ndarray, np.ndarray]]:
        if not self.config.class_metrics or self.dataset.num_classes < 2:
            return None
        return class_scores(self.model, self.eval_params, self._eval_batch)

    def _aggregate(self, ids: np.ndarray, share: slice, losses_mine: Optional[np.ndarray],
                   counts_mine: np.ndarray, objective: Optional[ClientObjective],
                   updates: torch.Tensor, state: Optional[torch.Tensor],
                   local: LocalTrainingConfig) -> Dict[str, Any]:
        """The server side of a round: the rule's coefficients (:meth:`_weigh`), the weighted
        sum of this process's ``updates`` (its ``share`` of the cohort ``ids``), the step; a
        record marked ``diverged``, with no step, when a loss read is not finite."""
        try:
            coef, step, losses = self._weigh(ids, losses_mine, counts_mine, objective, updates,
                                             state)
        except Diverged as why:
            return {"participants": int(ids.shape[0]), DIVERGED: str(why)}
        if updates.shape[0] and self.model.trains_alone(self.device):  # as _summed_round sums
            direction = fold_in_order(updates, step[share], longest_first(counts_mine, local))
        else:
            direction = torch.zeros_like(self.params)
            if updates.shape[0]:
                ops.weighted_average(updates, torch.from_numpy(step[share]).to(self.device),
                                     out=direction)
        return self._step(direction, ids.shape[0], coef, losses)

    def _weigh(self, ids: np.ndarray, losses_mine: Optional[np.ndarray], counts_mine: np.ndarray,
               objective: Optional[ClientObjective], updates: Optional[torch.Tensor],
               state: Optional[torch.Tensor]
               ) -> Tuple[np.ndarray, np.ndarray, Optional[np.ndarray]]:
        """The rule's coefficients ``coef [m]`` (committing the round), the ``step [m]`` each
        update is weighted by, the cohort's losses; ``updates`` None where
        :meth:`sums_as_trained` (nothing reads them).

        With the opt-in bound of the configuration (``max_update_norm``,
        ``update_norm_reference``, ``max_samples_per_client``;
        :mod:`fastfair.aggregators.bounds`, shared with the Flower strategy) the counts are
        capped and each update ``X_i`` is clipped to ``s_i X_i`` before the rule sees
        them; the step is ``sum_i c_i s_i X_i`` (coefficients times scales). Raises
        :class:`Diverged`, committing nothing, when a loss is not finite."""
        bound = self._bound()
        m = ids.shape[0]
        losses = None if losses_mine is None else self.dist.gather(losses_mine, m)
        if losses is not None:
            _check_losses(losses, ids)
        counts = bound.counts(self.dist.gather(counts_mine.astype(np.float64), m))
        inputs, scales = {}, None  # losses: None where the round computed none
        if updates is not None:
            inputs = self._round_inputs(objective, state, updates, m)
            if bound.clips:
                scales = bound.scales(self.dist.gather(_row_norms(updates), m))
                inputs = bound.clipped_inputs(inputs, scales)
        coef = np.asarray(self.rule.weights(ids, losses, num_samples=counts, **inputs),
                          dtype=np.float64)
        return coef, (coef if scales is None else coef * scales), losses

    def sums_as_trained(self, lane: Lane) -> bool:
        """Whether a round of this run may weight its clients before they train and fold each
        update into the sum as it finishes (``summed_with`` of
        :func:`~fastfair.sim.training.local.train_lanes`), holding one update instead of the
        cohort's: one process, a model that trains each client alone, a rule that reads no
        round input (``updates``, ``sq_norms``, a client objective's report) and trains no
        scalar beside the model, and no clipping bound (which needs every update's norm)."""
        return (self.dist.world_size == 1 and self.model.trains_alone(self.device)
                and not lane.trains_scalar and not self.rule.round_inputs
                and not self._bound().clips)

    def _bound(self) -> UpdateBound:
        return self.plan.bound

    def _step(self, direction: torch.Tensor, m: int, coef: np.ndarray,
              losses: Optional[np.ndarray]) -> Dict[str, Any]:
        """The server step along ``direction [P]`` summed over processes; the round's record."""
        self.optimizer.step(self.params, self.dist.sum(direction))
        self._add_iterate()
        assert self.rule.last_mixture is not None  # weights() committed the round, which sets it
        loss = {} if losses is None else {"train_loss": float(np.mean(losses))}
        record = {"participants": int(m), **loss, "max_coefficient": float(np.max(coef)),
                  **mixture_summary(self.rule.last_mixture)}
        groups = getattr(self.rule, "last_group_weights", None)  # a rule over groups
        if groups is not None:  # the smallest and largest weight of a group present
            record.update(group_weight_min=float(np.min(groups[groups > 0], initial=1.0)),
                          group_weight_max=float(groups.max()))
        return record

    @classmethod
    def play_round(cls, sims: Sequence["Simulation"], t: int,
                   cohorts: Sequence[np.ndarray]) -> List[Dict[str, Any]]:
        """Round ``t`` of several runs at once; ``cohorts[r]`` (m_r >= 1 ids) are run r's sampled
        clients. Returns each run's round record.

        The runs share one model architecture, device and local-training settings (a sweep's
        runs). Runs on the same data set with the same seed and cohort share one batch of
        client data; every run's cohort trains in one
        :func:`~fastfair.sim.training.local.train_lanes` pass (its own global model, objective
        and keys), then each run's rule weights its own updates and its server optimiser
        steps. Every per-client computation is the one the run makes alone.
        A group's first run keeps its cohort's batch for the next round: a cohort that repeats
        (full participation) trains on it again (:meth:`Simulation._train_batch`)."""
        lead = sims[0]
        cfg, dist, device = lead.config, lead.dist, lead.device
        local = LocalTrainingConfig(epochs=cfg.epochs, steps=cfg.local_steps,
                                    batch_size=cfg.batch_size, lr=cfg.client_lr(t),
                                    precision=cfg.precision)
        shares = [dist.my_slice(ids.shape[0]) for ids in cohorts]
        groups: Dict[Tuple[int, int, bytes], List[int]] = {}
        for r, (sim, ids) in enumerate(zip(sims, cohorts)):
            groups.setdefault((id(sim.dataset), sim.config.seed, ids.tobytes()), []).append(r)
        batches, keys = [], []
        lanes: List[Optional[Lane]] = [None] * len(sims)
        first = 0
        for members in groups.values():
            r0 = members[0]
            ids = cohorts[r0][shares[r0]]
            batch = sims[r0]._train_batch(ids, device)
            seed = torch_seed(sims[r0].config.seed, Stream.ROUND_TRAINING, t)
            for r in members:
                lanes[r] = Lane(sims[r].params, first + np.arange(len(ids)),
                                round_objective(sims[r].rule, sims[r].objective))
            batches.append(batch)
            keys.append(CohortKeys.of(seed, ids, device))
            first += len(ids)
        every = cast(List[Lane], lanes)  # every run is in one group: each has its lane
        if len(sims) == 1 and lead.sums_as_trained(every[0]):
            return [lead._summed_round(cohorts[0], shares[0], batches[0], keys[0], every[0],
                                       local)]
        batch = batches[0] if len(batches) == 1 else concat_batches(batches)
        key = keys[0] if len(keys) == 1 else CohortKeys.cat(keys)
        trained = train_lanes(lead.model, batch, key, every, local, received_loss=True)
        # The received models' losses: reported by training where the kernel trained (it computes
        # them on the way), else, for the runs that need them (needs_received_loss), one
        # inference pass per group (training leaves the params as they were).
        for g, members in enumerate(groups.values()):
            scored = [r for r in members
                      if trained[r][2] is None and sims[r].needs_received_loss()]
            if scored:
                params = torch.stack([sims[r].params for r in scored])
                mine, _ = evaluate_clients(lead.model, params, batches[g], accuracy=False)
                for j, r in enumerate(scored):
                    trained[r] = trained[r][:2] + (mine[j],)
        counts = {r: batches[g].counts
                  for g, members in enumerate(groups.values()) for r in members}
        return [sim._aggregate(ids, share, loss, counts[r], lane.objective, update, state, local)
                for r, (sim, ids, share, lane, (update, state, loss))
                in enumerate(zip(sims, cohorts, shares, every, trained))]

    def _summed_round(self, ids: np.ndarray, share: slice, batch: ClientBatch, keys: CohortKeys,
                      lane: Lane, local: LocalTrainingConfig) -> Dict[str, Any]:
        """A round of one run that sums as it trains (:meth:`Simulation.sums_as_trained`): the
        received model's losses where the run needs them, the coefficients, training folding each
        update into the sum as its client finishes (hand-out order), the server step along it."""
        losses = None
        if self.needs_received_loss():
            losses = evaluate_clients(self.model, self.params.unsqueeze(0), batch,
                                      accuracy=False)[0][0]
        try:
            coef, step, losses = self._weigh(ids, losses, batch.counts, None, None, None)
        except Diverged as why:
            return {"participants": int(ids.shape[0]), DIVERGED: str(why)}
        direction = train_lanes(self.model, batch, keys, [lane], local,
                                summed_with=step[share])[0][0]
        return self._step(direction, ids.shape[0], coef, losses)

    # ------------------------------------------------------------------ checkpoints
    def _state(self) -> Dict[str, Any]:
        state = {"params": self.params.clone(), "rule": self.rule.state_dict(),
                 "optimizer": self.optimizer.state_dict()}
        if self._average is not None:
            state.update(average=self._average.clone(), averaged=self._averaged)
        return state

    def _load(self, state: Dict[str, Any]) -> None:
        params = self._checked(state, "params", self.params)
        average = None
        if self.config.eval_average_iterates and state.get("averaged", 0):
            average = self._checked(state, "average", self.params.double())
        rule = self.plan.rule(self.dataset)
        optimizer = self.plan.optimizer()
        rule.load_state_dict(state["rule"])
        optimizer.load_state_dict(state["optimizer"])
        self.rule, self.optimizer, self.params = rule, optimizer, params
        self._average, self._averaged = average, int(state.get("averaged", 0))


def _row_norms(updates: torch.Tensor, rows: int = 0) -> np.ndarray:
    """``[n]`` float64 norms of the rows of ``updates [n, P]``, summed in float64 a block of
    rows at a time (never a float64 copy of the whole cohort)."""
    n, P = updates.shape
    rows = rows or max(1, (1 << 22) // max(P, 1))
    out = np.empty(n, dtype=np.float64)
    for i in range(0, n, rows):
        block = updates[i:i + rows].double()
        out[i:i + rows] = block.pow_(2).sum(1).sqrt_().cpu().numpy()
    return out


class Diverged(Exception):
    """A round's losses of the received model were not finite: the run diverged (the message
    says where); the round commits nothing."""


def _check_losses(losses: np.ndarray, ids: np.ndarray) -> None:
    """Raises :class:`Diverged` naming the first client whose loss of the received model is
    not finite (the rules would refuse the losses without saying why)."""
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        k = int(bad[0])
        raise Diverged(f"the global model's loss on client {int(ids[k])} is {losses[k]}")


def _scores(model: FlatModel, params: torch.Tensor,
            batch: ClientBatch) -> Tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(accuracy, loss, counts)`` of the model ``params [P]`` (``[E]`` each), or of L models
    ``params [L, P]`` (``[L, E]`` accuracy and loss), on the clients of ``batch``."""
    loss, acc = evaluate_clients(model, params, batch)
    assert acc is not None  # accuracy=True (the default) computes it
    return acc, loss, batch.counts


def evaluate_runs(sims: Sequence[Simulation]) -> List[Any]:
    """Every run's ``(test, validation)`` evaluation as :meth:`Simulation.evaluate` and
    :meth:`Simulation.evaluate_validation` give them: runs holding the same evaluation data
    (``evaluate_like``) are scored together, their global models ``[L, P]`` in one pass."""
    out: List[Any] = [None] * len(sims)
    groups: Dict[int, List[int]] = {}
    for r, sim in enumerate(sims):
        groups.setdefault(id(sim._eval_batch), []).append(r)
    for members in groups.values():
        lead = sims[members[0]]
        params = torch.stack([sims[r].eval_params for r in members])
        test = _scores(lead.model, params, lead._eval_batch)
        val = None if lead._val_batch is None else _scores(lead.model, params, lead._val_batch)
        for j, r in enumerate(members):
            out[r] = ((test[0][j], test[1][j], test[2]),
                      None if val is None else (val[0][j], val[1][j], val[2]))
    return out


