"""Every random stream of the simulator, listed once.

A run's randomness is a pure function of its seed, so a resumed run, or one split over any number
of processes, draws exactly what an uninterrupted single-process run draws. That holds only while
no two streams coincide: each stream below is a (derivation, tag) pair, :class:`Stream` lists all
of them, and every draw of the simulator goes through one of the functions here.

Derivations:

- ``KEYS``: 64-bit keys ``hash(seed, id, tag)`` for a vector of ids (client ids, or a round
  number as the id), optionally mixed with the round (:func:`keys`, :func:`torch_seed`).
- ``ROUND_KEYS``: ``hash(seed ^ tag, id, round)``, per-round keys of positions (:func:`round_keys`).
- ``NUMPY``: ``numpy.random.default_rng([seed, *context, tag])`` (:func:`numpy_rng`).
- ``SAMPLE_CLIENTS`` / ``SAMPLE_AVAILABLE``: the seed ``seed ^ tag`` handed to
  :func:`fastfair.ops.sample_clients` / :func:`fastfair.ops.sample_available`, which key their own
  counter-based generators by (seed, round) (:func:`kernel_seed`).
- ``RAW``: the seed itself, for the global model's initial weights (:func:`raw_seed`).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Optional, Sequence

import numpy as np

if TYPE_CHECKING:  # torch is imported where it is used
    import torch


class Derivation(enum.Enum):
    KEYS = "keys"
    ROUND_KEYS = "round_keys"
    NUMPY = "numpy"
    SAMPLE_CLIENTS = "sample_clients"
    SAMPLE_AVAILABLE = "sample_available"
    RAW = "raw"


@enum.unique
class Stream(enum.Enum):
    """Every random stream: ``(derivation, tag)``; no two members share both."""

    # Synthetic(alpha, beta): client sizes (two uniforms for Box-Muller), a client's model and
    # feature mean, its samples, the shared model of the IID variant.
    SYNTHETIC_SIZE_A = (Derivation.KEYS, 1)
    SYNTHETIC_SIZE_B = (Derivation.KEYS, 2)
    SYNTHETIC_CLIENT = (Derivation.KEYS, 3)
    SYNTHETIC_SAMPLES = (Derivation.KEYS, 4)
    SYNTHETIC_SHARED_MODEL = (Derivation.KEYS, 7)
    # The grouped workload: the common and group models, a client's group, its size (two
    # uniforms for Box-Muller) and its samples.
    GROUPED_MODELS = (Derivation.KEYS, 0x6D0)
    GROUPED_GROUP = (Derivation.KEYS, 0x6A0)
    GROUPED_SIZE_A = (Derivation.KEYS, 0x6A1)
    GROUPED_SIZE_B = (Derivation.KEYS, 0x6A2)
    GROUPED_CLIENT = (Derivation.KEYS, 0x6A3)
    # scikit-learn digits: the split over clients and each client's sample order.
    DIGITS_PARTITION = (Derivation.NUMPY, 0xD161)
    DIGITS_ORDER = (Derivation.NUMPY, 0xD162)
    # The global model's initial weights.
    MODEL_INIT = (Derivation.RAW, 0)
    # Which clients are evaluated when K exceeds --eval-clients.
    EVAL_CLIENTS = (Derivation.NUMPY, 0xE7A1)
    # Availability: the uniform cohort; Bernoulli per-client probabilities, mask and pick; the
    # random-access model's client weights and per-round draws.
    UNIFORM_COHORT = (Derivation.SAMPLE_CLIENTS, 0)
    BERNOULLI_PROB = (Derivation.KEYS, 0xA7A1)
    BERNOULLI_MASK = (Derivation.SAMPLE_AVAILABLE, 0)
    BERNOULLI_PICK = (Derivation.SAMPLE_CLIENTS, 0xB0B)
    RAM_WEIGHTS = (Derivation.KEYS, 0x4A3)
    RAM_DRAWS = (Derivation.ROUND_KEYS, 0x4A3)
    # Device populations: a client's tier, speed and bandwidths (two uniforms each for
    # Box-Muller), time zone, online coin and dropout per round, session start and length per
    # window; the invitations of a round (positions of a candidate list).
    POPULATION_TIER = (Derivation.KEYS, 0xD7A0)
    POPULATION_SPEED_A = (Derivation.KEYS, 0xD7A1)
    POPULATION_SPEED_B = (Derivation.KEYS, 0xD7A2)
    POPULATION_DOWN_A = (Derivation.KEYS, 0xD7A3)
    POPULATION_DOWN_B = (Derivation.KEYS, 0xD7A4)
    POPULATION_UP_A = (Derivation.KEYS, 0xD7A5)
    POPULATION_UP_B = (Derivation.KEYS, 0xD7A6)
    POPULATION_PHASE = (Derivation.KEYS, 0xD7A7)
    POPULATION_ONLINE = (Derivation.KEYS, 0xD7A8)
    POPULATION_DROPOUT = (Derivation.KEYS, 0xD7A9)
    POPULATION_DROP_AT = (Derivation.KEYS, 0xD7AA)
    POPULATION_SESSION_START = (Derivation.KEYS, 0xD7AB)
    POPULATION_SESSION_LENGTH = (Derivation.KEYS, 0xD7AC)
    POPULATION_INVITE = (Derivation.ROUND_KEYS, 0xD7AD)
    # Local training: the round's key (the round as id) and, under it, each client's shuffles
    # and each client's dropout masks of a step (the step as round).
    ROUND_TRAINING = (Derivation.KEYS, 0xA0D)
    SHUFFLE = (Derivation.KEYS, 0x5EED)
    DROPOUT = (Derivation.KEYS, 0xD0)
    # Data sets on disk: which users (LEAF, npz-clients) or samples (vision) go to which client,
    # and the matching split of a vision test set.
    CLIENT_SUBSET = (Derivation.NUMPY, 0xC5)
    VISION_PARTITION = (Derivation.NUMPY, 0x51)
    VISION_TEST_SPLIT = (Derivation.NUMPY, 0x52)
    # FedEvg: the initial synthetic set, a client's model and chains in a round, the server's
    # Langevin noise in a round, the evaluation classifier.
    FEDEVG_SYNTHETIC_INIT = (Derivation.KEYS, 0xE5)
    FEDEVG_CLIENT = (Derivation.KEYS, 0xC0)
    FEDEVG_SERVER_NOISE = (Derivation.KEYS, 0x5E)
    FEDEVG_EVAL = (Derivation.KEYS, 0xEA)
    # SuPerFed: a client's local model at first use; the mixing weights of a round.
    SUPERFED_LOCAL_INIT = (Derivation.KEYS, 0x10CA)
    SUPERFED_LAMBDA = (Derivation.NUMPY, 0x5F)

    @property
    def derivation(self) -> Derivation:
        return self.value[0]

    @property
    def tag(self) -> int:
        return self.value[1]


def _expect(stream: Stream, derivation: Derivation) -> None:
    if stream.derivation is not derivation:
        raise ValueError(f"stream {stream.name} is derived by {stream.derivation.value}, not "
                         f"{derivation.value}")


_SPLITMIX = (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)


def splitmix64(x: np.ndarray) -> np.ndarray:
    """A 64-bit mixing hash, elementwise (uint64 arithmetic wraps, as intended)."""
    with np.errstate(over="ignore"):
        x = x + np.uint64(_SPLITMIX[0])
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_SPLITMIX[1])
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_SPLITMIX[2])
        return x ^ (x >> np.uint64(31))


def _signed(c: int) -> int:
    return c - (1 << 64) if c >= 1 << 63 else c


def _shr(x: torch.Tensor, s: int) -> torch.Tensor:
    """Logical right shift of int64 tensors holding uint64 bit patterns."""
    return (x >> s) & ((1 << (64 - s)) - 1)


def splitmix64_torch(x: torch.Tensor) -> torch.Tensor:
    """:func:`splitmix64` on a torch int64 tensor holding uint64 bit patterns, on its device
    (two's-complement int64 arithmetic wraps exactly as uint64 does); bit-identical to the NumPy
    version."""
    x = x + _signed(_SPLITMIX[0])
    x = (x ^ _shr(x, 30)) * _signed(_SPLITMIX[1])
    x = (x ^ _shr(x, 27)) * _signed(_SPLITMIX[2])
    return x ^ _shr(x, 31)


def uniform_torch(keys: torch.Tensor) -> torch.Tensor:
    """:func:`uniform` of int64 key tensors: float64 in (0, 1) on their device."""
    return (_shr(keys, 11).double() + 0.5) / float(1 << 53)


def keyed_uniform(key: torch.Tensor, call: int, shape: Sequence[int],
                  device: Optional[torch.device]) -> torch.Tensor:
    """float32 uniforms in [0, 1) of ``shape`` (24 random bits each) from a 0-dim int64 tensor
    ``key`` (a :func:`step_keys` key) and a call counter: element i is the top 24 bits of
    ``splitmix64(i ^ splitmix64(key ^ call * golden))``, on ``device``; a pure function of its
    arguments, identical on every device."""
    import torch

    stream = splitmix64_torch(key ^ _signed((call * _SPLITMIX[0]) % (1 << 64)))
    index = torch.arange(int(np.prod(shape)), dtype=torch.int64, device=device).reshape(shape)
    return _shr(splitmix64_torch(index ^ stream), 40).to(torch.float32) * (1.0 / (1 << 24))


def _hash(seed: int, ids: np.ndarray, tag: int) -> np.ndarray:
    base = splitmix64(np.array([seed & 0xFFFFFFFFFFFFFFFF], dtype=np.uint64))
    mixed = splitmix64(base ^ np.asarray(ids, dtype=np.uint64))
    return splitmix64(mixed ^ np.uint64(tag))


def uniform(keys: np.ndarray) -> np.ndarray:
    """Uniform (0, 1) from 64-bit keys (53 random bits, never exactly 0)."""
    return ((keys >> np.uint64(11)).astype(np.float64) + 0.5) / float(1 << 53)


def keys(seed: int, stream: Stream, ids: np.ndarray, round: Optional[int] = None) -> np.ndarray:
    """``[n]`` uint64 keys of ``ids [n]`` in a ``KEYS`` stream; with ``round``, a fresh set of
    keys per round (the hash mixed with the round)."""
    _expect(stream, Derivation.KEYS)
    h = _hash(seed, ids, stream.tag)
    return h if round is None else splitmix64(h ^ np.uint64(round))


def torch_seed(seed: int, stream: Stream, index: int = 0, round: Optional[int] = None) -> int:
    """A non-negative 63-bit seed (for ``torch.Generator.manual_seed``) from the key of one
    ``index`` of a ``KEYS`` stream."""
    return int(keys(seed, stream, np.array([index]), round)[0] >> np.uint64(1))


def shuffle_uniforms(client_keys: torch.Tensor, epochs: torch.Tensor,
                     positions: torch.Tensor) -> torch.Tensor:
    """Uniform (0, 1) sort keys ``[n]`` (float64, on the device of the inputs) of local
    training's shuffles: row ``positions[i]`` of the client whose ``SHUFFLE`` key is
    ``client_keys[i]`` (:func:`shuffle_client_keys`, an int64 tensor) in its epoch ``epochs[i]``.
    """
    h = splitmix64_torch(client_keys ^ epochs)
    return uniform_torch(splitmix64_torch(h ^ positions))


def shuffle_client_keys(seed: int, client_ids: np.ndarray,
                        device: Optional[torch.device] = None) -> torch.Tensor:
    """``[m]`` int64 tensor of the clients' ``SHUFFLE`` keys under ``seed`` (the round's training
    key), hashed once per cohort on the host."""
    import torch

    return torch.from_numpy(keys(seed, Stream.SHUFFLE, client_ids).view(np.int64)).to(device)


def step_keys(seed: int, client_ids: np.ndarray, step: int) -> np.ndarray:
    """``[m]`` int64 keys (63 bits, non-negative) of clients ``client_ids`` at local step ``step``
    in the ``DROPOUT`` stream under ``seed`` (the round's training key): a client's dropout masks
    depend on (seed, round, client id, step) alone, never on the rest of the cohort."""
    return advance_keys(keys(seed, Stream.DROPOUT, client_ids), step)


def advance_keys(dropout_keys: np.ndarray, step: int) -> np.ndarray:
    """:func:`step_keys` at local step ``step`` from the clients' ``DROPOUT`` keys
    ``dropout_keys [m]`` (uint64, ``keys(seed, Stream.DROPOUT, ids)``), hashed once per round."""
    return (splitmix64(dropout_keys ^ np.uint64(step)) >> np.uint64(1)).astype(np.int64)


@dataclass
class CohortKeys:
    """The training keys of a batch's clients: ``shuffle [C]`` (int64 tensor on the training
    device, :func:`shuffle_client_keys`) and ``dropout [C]`` (uint64, the ``DROPOUT`` keys
    :func:`advance_keys` steps). Clients of runs with different seeds sit side by side in one
    batch with their own keys (:meth:`cat`)."""

    shuffle: Any
    dropout: np.ndarray

    @classmethod
    def of(cls, seed: int, client_ids: np.ndarray,
           device: Optional[torch.device] = None) -> "CohortKeys":
        """The keys of clients ``client_ids [C]`` under the round training key ``seed``."""
        ids = np.asarray(client_ids, dtype=np.int64)
        return cls(shuffle_client_keys(seed, ids, device), keys(seed, Stream.DROPOUT, ids))

    @classmethod
    def cat(cls, parts: Sequence["CohortKeys"]) -> "CohortKeys":
        """The keys of several batches' clients, concatenated in order."""
        import torch

        return cls(torch.cat([p.shuffle for p in parts]),
                   np.concatenate([p.dropout for p in parts]))


def round_keys(seed: int, stream: Stream, ids: np.ndarray, round: int) -> np.ndarray:
    """``[n]`` uint64 keys of ``ids`` in round ``round`` of a ``ROUND_KEYS`` stream."""
    _expect(stream, Derivation.ROUND_KEYS)
    return _hash(seed ^ stream.tag, ids, round)


def numpy_rng(seed: int, stream: Stream, *context: int) -> np.random.Generator:
    """A NumPy generator of a ``NUMPY`` stream, optionally per ``context`` (e.g. the round)."""
    _expect(stream, Derivation.NUMPY)
    return np.random.default_rng([seed, *context, stream.tag])


def kernel_seed(seed: int, stream: Stream) -> int:
    """The seed a ``SAMPLE_CLIENTS`` / ``SAMPLE_AVAILABLE`` stream hands to its kernel."""
    if stream.derivation not in (Derivation.SAMPLE_CLIENTS, Derivation.SAMPLE_AVAILABLE):
        raise ValueError(f"stream {stream.name} is derived by {stream.derivation.value}, not by "
                         "a sampling kernel")
    return seed ^ stream.tag


def raw_seed(seed: int, stream: Stream) -> int:
    """The run's seed itself, for the one ``RAW`` stream (the model's initial weights)."""
    _expect(stream, Derivation.RAW)
    return seed
