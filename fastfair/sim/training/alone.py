"""Local training of a cohort client by client, each copy as the plain module: for models whose
batched form (``vmap`` over ``[m, P]`` rows) is slower on the CPU than the module itself
(:meth:`~fastfair.sim.models.flat.FlatModel.trains_alone`). The cohort's clients train
concurrently, one per thread, as many at a time as the process's torch threads
(``torch.set_num_threads``, ``--threads``, ``Experiment(threads=)``), each client's operations on
one thread; a client's numbers are therefore the same for any thread count and in any company.
"""

from __future__ import annotations

import threading
from typing import Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
import torch

from fastfair import ops
from fastfair.sim.data.base import ClientBatch
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.process import one_thread_each
from fastfair.sim.seeding import CohortKeys, advance_keys
from fastfair.sim.training.fused_sgd import FusedDenseSGD
from fastfair.sim.training.lanes import Lane, LaneObjectives
from fastfair.sim.training.precision import autocast
from fastfair.sim.training.schedule import LocalTrainingConfig, keyed_schedule


class OrderedFold:
    r"""The weighted sum :math:`\sum_i c_i \Delta_i` of a cohort's updates, folded as the clients
    finish instead of held as ``[M, P]`` rows: ``weights [M]`` (float64) are the coefficients of
    the rows in the order training hands them out. Row i is added once rows 0..i-1 are (a row that
    finishes early waits, alone, for those before it), so the sum is the same bits for any
    thread count: with one thread no update waits, and memory holds one update, not M.
    :attr:`result` (``[P]`` float32) is the sum once every row has been folded."""

    def __init__(self, weights: np.ndarray) -> None:
        self.weights = np.asarray(weights, dtype=np.float64)
        self._sum = ops.Accumulator()
        self._waiting: Dict[int, torch.Tensor] = {}
        self._next = 0
        self._lock = threading.Lock()

    def put(self, i: int, update: torch.Tensor) -> None:
        """Row ``i``'s update ``[P]`` (kept until the rows before it are folded)."""
        with self._lock:
            self._waiting[i] = update
            while self._next in self._waiting:
                self._sum.add(self._waiting.pop(self._next), float(self.weights[self._next]))
                self._next += 1

    @property
    def result(self) -> torch.Tensor:
        if self._next != len(self.weights) or self._waiting:
            raise RuntimeError(f"{self._next} of {len(self.weights)} rows folded")
        return cast(torch.Tensor, self._sum.result(normalize=False))  # the rows' type


def fold_in_order(updates: torch.Tensor, weights: np.ndarray, order: np.ndarray) -> torch.Tensor:
    r""":math:`\sum_i w_i \Delta_i` ``[P]`` of ``updates [m, P]`` (m >= 1) with ``weights [m]``,
    folded in ``order`` (:func:`~fastfair.sim.training.schedule.longest_first`, the order
    :func:`train_alone` hands the clients out): the bits of the :class:`OrderedFold` that
    ``summed_with`` makes while the same clients train, so that a run's rounds do not depend on
    whether its cohort's updates were held (a sweep, several processes) or folded."""
    fold = OrderedFold(np.asarray(weights, dtype=np.float64)[order])
    for j, i in enumerate(order):
        fold.put(j, updates[int(i)])
    return fold.result


def train_alone(model: ModuleModel, batch: ClientBatch, keys: CohortKeys, lanes: Sequence[Lane],
                config: LocalTrainingConfig, sorted_client: np.ndarray, sorted_lane: np.ndarray,
                position: np.ndarray, starts: torch.Tensor, updates: Optional[torch.Tensor],
                extra: Optional[torch.Tensor], fold: Optional[OrderedFold] = None) -> None:
    r"""The updates of the copies of a training pass, each trained alone: copy ``i`` (batch
    client ``sorted_client[i]`` of lane ``sorted_lane[i]``, longest first, as
    :func:`~fastfair.sim.training.local.train_lanes` sorts them) starts from its lane's
    ``starts[sorted_lane[i]] [P]``, trains through all its local steps,
    ``theta <- theta - lr * grad`` on each parameter tensor in place (a view of the copy's
    own row) with the loss its objective of its mean loss over the minibatch's real samples
    only (no padding rows are computed), and leaves
    :math:`\Delta = \theta_{start} - \theta` in row ``position[i]`` of ``updates [M, P]``;
    its trained scalar goes to
    ``extra[position[i]]`` (float64; None when no lane trains one). With ``fold`` (one lane,
    no trained scalar) the updates go to it in hand-out order instead, and ``updates`` is None.

    ``min(torch.get_num_threads(), M)`` copies train at a time, each on its own thread, with
    torch's intra-op threads set to one for the duration
    (:func:`~fastfair.sim.process.one_thread_each`), so the arithmetic of a copy never depends
    on the thread count or on the other copies.
    """
    device = starts.device
    schedule = [(take, valid.sum(1)) for take, valid in
                keyed_schedule(batch.counts.astype(np.int64), config, keys.shuffle,
                               sorted_client, device)]
    dropout = keys.dropout[sorted_client]

    def row(i: int) -> None:
        objectives = LaneObjectives(lanes, sorted_lane[i:i + 1], starts, config.lr, device)
        # The copy's row is a tensor of its own: views of the shared updates would share their
        # version counter, and one thread's write could invalidate another's graph.
        start = starts[int(sorted_lane[i])]
        own = start.clone()
        state = _train_row(model, batch, config, schedule, i, dropout[i], objectives, own)
        if fold is not None:
            fold.put(i, own.neg_().add_(start))  # start - own, in its own memory
            return
        assert updates is not None
        torch.sub(start, own, out=updates[int(position[i])])
        if extra is not None and state is not None:
            extra[int(position[i])] = state[0]

    one_thread_each(row, range(len(sorted_client)))  # handed out longest first


def _train_row(model: ModuleModel, batch: ClientBatch, config: LocalTrainingConfig,
               schedule: List[Tuple[torch.Tensor, torch.Tensor]], i: int, dropout_key: np.uint64,
               objectives: LaneObjectives, row: torch.Tensor) -> Optional[torch.Tensor]:
    """All the local steps of row ``i`` (``row [P]``, trained in place); returns its final
    trained scalar ``[1]`` (None when no lane trains one)."""
    key = np.array([dropout_key], dtype=np.uint64)
    state = objectives.initial_state()
    # A row whose loss is its plain mean, in fp32, may step its large dense layers inside their
    # products: nothing else reads those weights' gradients.
    fuse = not objectives.groups and config.precision == "fp32"
    with model.client_module(row) as (module, leaves), \
            FusedDenseSGD(module, model.param_names, leaves, fuse) as fused:
        for t, (take, counts) in enumerate(schedule):
            if i >= take.shape[0]:
                break  # rows still training are a prefix: this one has finished
            n = int(counts[i])
            rows = take[i, :n]  # a row's real samples are the first n of its minibatch
            x, y = batch.x.index_select(0, rows), batch.y.index_select(0, rows)
            step_key = torch.from_numpy(advance_keys(key, t))[0] if model.random else None
            mode = model.client_mode(step_key, n)
            with mode, autocast(config.precision, x.device):
                logits = module(model.input_layout(x))
            model.saw_pass(mode)
            mean = model.sample_loss(logits.float().unsqueeze(0), y.unsqueeze(0)).mean(1)
            s = None if state is None else state.detach().requires_grad_(True)
            flat = _flat(leaves, row) if objectives.groups else row  # read by objectives only
            loss = objectives.total(mean, flat.unsqueeze(0), s)
            plain, outputs = fused.split(leaves)
            grads = torch.autograd.grad(loss, plain + outputs + ([] if s is None else [s]))
            with torch.no_grad():
                for leaf, grad in zip(plain, grads):
                    leaf.sub_(grad, alpha=config.lr)
                fused.step(grads[len(plain):len(plain) + len(outputs)], config.lr)
                if state is not None:
                    state -= objectives.state_lr[:1] * grads[-1]
    return state


def _flat(leaves: Sequence[torch.Tensor], row: torch.Tensor) -> torch.Tensor:
    """``[P]``: the trained ``leaves`` side by side (differentiable), then the rest of ``row``
    (the buffers, no gradient), for objectives that read a client's whole parameter row."""
    parts = [leaf.reshape(-1) for leaf in leaves]
    width = sum(p.numel() for p in parts)
    if width < row.numel():
        parts.append(row[width:].detach())
    return torch.cat(parts)

