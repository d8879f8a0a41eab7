"""Which clients take part in a round.

- ``uniform``: m distinct clients out of K, uniformly, in O(m)
  (:func:`fastfair.ops.sample_clients`).
- ``bernoulli``: client k is available with probability q_k (one coin each, O(K)); when more than
  m are available, m of them are chosen uniformly. Probabilities are one number ``prob`` or
  heterogeneous, ``prob_low``..``prob_high`` drawn per client from (seed, id).
- ``ram``: the random access model of the restricted-availability setting: each of m relay slots
  draws one client i.i.d. from fixed probabilities rho (sorted uniforms, normalised, largest
  first: the first clients are the most available); repeated draws of one client count once.

Every draw is a pure function of (seed, round), so runs are reproducible and resumable.
"""

from __future__ import annotations

from typing import Any, Dict, Optional

import numpy as np

from fastfair import ops
from fastfair._options import check_options, signature_options
from fastfair.sim.names import AVAILABILITY_PROCESSES as AVAILABILITY
from fastfair.sim.seeding import Stream, kernel_seed, keys, round_keys, uniform


def ram_probabilities(u: np.ndarray) -> np.ndarray:
    """rho = sort_desc(u / sum(u)) for uniforms ``u [K]`` (the generator of the random access
    model)."""
    u = np.asarray(u, dtype=np.float64)
    if u.ndim != 1 or u.size == 0 or (u <= 0).any():
        raise ValueError("u must be a non-empty vector of positive numbers")
    return np.sort(u / u.sum())[::-1]


def ram_draw(rho: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Categorical draws ``searchsorted(cumsum(rho), u * sum(rho), side='right')`` for uniforms
    ``u [n]`` (rho need not sum to one)."""
    cum = np.cumsum(np.asarray(rho, dtype=np.float64))
    return np.minimum(np.searchsorted(cum, np.asarray(u) * cum[-1], side="right"), cum.size - 1)


class Availability:
    """``sample(round) -> ids``: the clients of a round, int64, sorted."""

    def __init__(self, num_clients: int, per_round: int, seed: int) -> None:
        if not 1 <= per_round <= num_clients:
            raise ValueError(f"per_round must be in [1, {num_clients}]; got {per_round}")
        self.num_clients, self.per_round, self.seed = int(num_clients), int(per_round), int(seed)

    def sample(self, round: int) -> np.ndarray:
        raise NotImplementedError

    def round_record(self) -> Dict[str, Any]:
        """What the last round adds to its record (a population's clock; nothing here)."""
        return {}

    def state_dict(self) -> Dict[str, Any]:
        """What changes between rounds (nothing: every draw is a function of the round)."""
        return {}

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Continues from :meth:`state_dict`; a state of another kind is refused."""
        if state:
            raise ValueError("checkpoint holds the state of a population (a virtual clock); "
                             "this run has none: give it the same --population")


class UniformAvailability(Availability):
    def sample(self, round: int) -> np.ndarray:
        return np.sort(ops.sample_clients(self.num_clients, self.per_round,
                                          seed=kernel_seed(self.seed, Stream.UNIFORM_COHORT),
                                          round=round))


class BernoulliAvailability(Availability):
    def __init__(self, num_clients: int, per_round: int, seed: int,
                 prob: Optional[float] = None, prob_low: Optional[float] = None,
                 prob_high: Optional[float] = None) -> None:
        super().__init__(num_clients, per_round, seed)
        if prob is not None and (prob_low is not None or prob_high is not None):
            raise ValueError("give prob, or prob_low and prob_high, not both")
        if prob is None and (prob_low is None) != (prob_high is None):
            raise ValueError("prob_low and prob_high go together")
        if prob is None and prob_low is None:
            prob = min(1.0, 2.0 * per_round / num_clients)
        if prob is not None:
            if not 0 < prob <= 1:
                raise ValueError(f"prob must be in (0, 1]; got {prob}")
            self.prob: Any = float(prob)
        else:
            assert prob_low is not None and prob_high is not None  # they go together (above)
            if not 0 <= prob_low <= prob_high <= 1 or prob_high == 0:
                raise ValueError(f"need 0 <= prob_low <= prob_high <= 1, prob_high > 0; got "
                                 f"{prob_low}, {prob_high}")
            u = uniform(keys(seed, Stream.BERNOULLI_PROB, np.arange(num_clients)))
            self.prob = prob_low + (prob_high - prob_low) * u

    def sample(self, round: int) -> np.ndarray:
        mask = ops.sample_available(self.prob, seed=kernel_seed(self.seed, Stream.BERNOULLI_MASK),
                                    round=round,
                                    num_clients=self.num_clients)
        available = np.flatnonzero(mask)
        if available.size > self.per_round:
            pick = ops.sample_clients(available.size, self.per_round,
                                      seed=kernel_seed(self.seed, Stream.BERNOULLI_PICK),
                                      round=round)
            available = np.sort(available[pick])
        return available.astype(np.int64)


class RandomAccessAvailability(Availability):
    def __init__(self, num_clients: int, per_round: int, seed: int) -> None:
        super().__init__(num_clients, per_round, seed)
        self.rho = ram_probabilities(uniform(keys(seed, Stream.RAM_WEIGHTS,
                                                  np.arange(num_clients))))

    def sample(self, round: int) -> np.ndarray:
        slots = (np.arange(self.per_round, dtype=np.uint64)
                 + np.uint64(self.per_round) * np.uint64(round))
        u = uniform(round_keys(self.seed, Stream.RAM_DRAWS, slots, round))
        return np.unique(ram_draw(self.rho, u)).astype(np.int64)


def build_availability(name: str, num_clients: int, per_round: int, seed: int,
                       options: Dict[str, Any]) -> Availability:
    """An availability model by name ('uniform', 'bernoulli', 'ram') with its options."""
    check_availability(name, options)
    return AVAILABILITY[name](num_clients, per_round, seed, **options)


def check_availability(name: str, options: Dict[str, Any]) -> None:
    """Raises unless ``name`` is an availability model and ``options`` are its options (names
    and types), before anything is built."""
    if name not in AVAILABILITY:
        raise ValueError(f"availability must be one of {', '.join(AVAILABILITY)}; got {name!r}")
    spec = signature_options(AVAILABILITY[name].__init__,
                             skip=("num_clients", "per_round", "seed"))
    check_options(f"availability {name!r}", options, spec)
