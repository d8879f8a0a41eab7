"""The lanes of a batched training pass (:func:`fastfair.sim.training.local.train_lanes`), one per
run, and their client objectives: which rows minimise their plain mean loss and which their
rule's objective, evaluated per group of equal objectives in one call."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple, cast

import numpy as np
import torch

from fastfair.aggregators.objectives import ClientObjective


@dataclass
class Lane:
    """One run's share of a batched training pass
    (:func:`~fastfair.sim.training.local.train_lanes`): its global model ``global_params [P]``, the
    batch clients it trains (``clients [m_r]``, indices into the batch) and the objective its rule
    gives them (None: the plain mean loss)."""

    global_params: torch.Tensor
    clients: np.ndarray
    objective: Optional[ClientObjective] = None

    @property
    def trains_scalar(self) -> bool:
        """Whether the lane's objective trains a scalar beside the model (Fed-CVaR-Avg's
        threshold)."""
        return self.objective is not None and self.objective.initial_state() is not None


class LaneObjectives:
    """The lanes' client objectives over the rows of a
    :func:`~fastfair.sim.training.local.train_lanes` pass (sorted order): which rows minimise their
    plain mean loss, which an objective (lanes whose objectives are equal, e.g. one rule's seeds,
    evaluate it in one call), and the scalar each row trains beside its model."""

    def __init__(self, lanes: Sequence[Lane], sorted_lane: np.ndarray, starts: torch.Tensor,
                 lr: float, device: torch.device) -> None:
        self.starts = [None if lane.objective is None else lane.objective.initial_state()
                       for lane in lanes]
        groups: Dict[Tuple[Any, ...], List[int]] = {}
        for r, lane in enumerate(lanes):
            if lane.objective is not None:
                key = tuple(sorted(lane.objective.to_config().items()))
                groups.setdefault(key, []).append(r)
        # Per group: its objective, the positions (ascending) of its rows, whose prefix below a
        # is the rows still training, and the received model of each row (one lane: its own).
        self.groups = []
        plain = np.ones(len(sorted_lane))
        for members in groups.values():
            positions = np.flatnonzero(np.isin(sorted_lane, members))
            plain[positions] = 0.0
            index = torch.as_tensor(positions, device=device)
            received = lanes[members[0]].global_params if len(members) == 1 else \
                starts[torch.as_tensor(sorted_lane[positions], device=device)]
            objective = cast(ClientObjective, lanes[members[0]].objective)  # grouped: not None
            self.groups.append((objective, positions, index, received,
                                self.starts[members[0]] is not None))
        self.whole = len(lanes) == 1  # one lane owns every row: no gathers
        # Plain rows' losses enter as mean * 1 (rows with an objective as mean * 0): exact, so
        # a row's gradient is the same in any company.
        self.plain = torch.as_tensor(plain, device=device) if plain.any() else None
        self.extra = None
        if any(s is not None for s in self.starts):
            start = np.array([self.starts[r] or 0.0 for r in sorted_lane], dtype=np.float64)
            lr_of = [0.0 if lane.objective is None else lane.objective.state_lr(lr)
                     for lane in lanes]
            self.extra = torch.as_tensor(start, device=device)
            self.state_lr = torch.as_tensor(np.array(lr_of, dtype=np.float64)[sorted_lane],
                                            device=device)

    def initial_state(self) -> Optional[torch.Tensor]:
        """``[M]`` float64 start values of the trained scalar (0 on rows without one), or None
        when no lane trains one."""
        return self.extra

    def total(self, mean: torch.Tensor, params: torch.Tensor,
              extra: Optional[torch.Tensor]) -> torch.Tensor:
        r""":math:`\sum` over the a rows still training of each row's objective of its masked
        mean loss ``mean [a]`` (``params [a, P]``, ``extra [a]``)."""
        if not self.groups:
            return mean.sum()
        a = mean.shape[0]
        total = 0.0 if self.plain is None else (mean * self.plain[:a].to(mean.dtype)).sum()
        for objective, positions, index, received, stateful in self.groups:
            if self.whole:
                loss, p, g, s = mean, params, received, extra
            else:
                n = int(np.searchsorted(positions, a))
                rows = index[:n]
                loss, p, s = mean[rows], params[rows], None if extra is None else extra[rows]
                g = received if received.dim() == 1 else received[:n]
            total = total + objective(loss, p, g, s if stateful else None).sum()
        return cast(torch.Tensor, total)  # groups is not empty: a tensor was added
