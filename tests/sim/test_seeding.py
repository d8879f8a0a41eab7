"""Every random stream of the simulator is listed once, and no two of them draw the same keys."""

from __future__ import annotations

import enum
import re

import numpy as np
import pytest

from fastfair.sim import seeding
from fastfair.sim.seeding import Derivation, Stream
from tests.helpers import ROOT


def _aliases(streams) -> list:
    """Names an Enum made aliases of an earlier member with the same value: iterating the enum
    hides them, so only ``__members__`` shows two streams sharing (derivation, tag)."""
    return [name for name, member in streams.__members__.items() if member.name != name]


def test_no_two_streams_share_derivation_and_tag():
    assert _aliases(Stream) == []
    # The check sees a shared pair (a list of the values of ``Stream`` would not: it has no
    # aliases in it).
    clash = enum.Enum("Clash", {"A": (Derivation.KEYS, 1), "B": (Derivation.KEYS, 1)})
    assert _aliases(clash) == ["B"] and len(list(clash)) == 1


def test_keys_are_independent_of_other_ids():
    a = seeding.keys(7, Stream.SYNTHETIC_SIZE_A, np.array([1, 2, 3]))
    b = seeding.keys(7, Stream.SYNTHETIC_SIZE_A, np.array([3]))
    assert a[2] == b[0] and len(set(a.tolist())) == 3


def _draws(seed: int, ids: np.ndarray, rounds: range) -> dict:
    """The 64-bit keys every hash-derived stream gives for ``ids`` over ``rounds``."""
    out = {}
    for s in Stream:
        if s.derivation is Derivation.KEYS:
            out[s.name] = seeding.keys(seed, s, ids)
            out[s.name + "/round"] = np.concatenate(
                [seeding.keys(seed, s, ids, round=t) for t in rounds])
        elif s.derivation is Derivation.ROUND_KEYS:
            out[s.name] = np.concatenate([seeding.round_keys(seed, s, ids, t) for t in rounds])
    return out


@pytest.mark.parametrize("seed", [0, 1, 0x4A3, 2 ** 40 + 3])
def test_hash_streams_never_collide(seed):
    # Ids and rounds up to 300 cover every (stream, id, round) a default run draws; a shared key
    # between two streams would make two draws of a run coincide.
    draws = _draws(seed, np.arange(300), range(1, 301))
    every = np.concatenate(list(draws.values()))
    values, counts = np.unique(every, return_counts=True)
    owners = [name for name, keys in draws.items() if np.isin(values[counts > 1], keys).any()]
    assert not owners, f"streams sharing keys: {owners}"


def test_kernel_and_numpy_streams_are_distinct():
    kernel = [(s.derivation, seeding.kernel_seed(5, s)) for s in Stream
              if s.derivation in (Derivation.SAMPLE_CLIENTS, Derivation.SAMPLE_AVAILABLE)]
    assert len(kernel) == len(set(kernel))
    draws = [seeding.numpy_rng(5, s, 3).integers(0, 2 ** 62, 4).tolist() for s in Stream
             if s.derivation is Derivation.NUMPY]
    assert len({tuple(d) for d in draws}) == len(draws)


def test_a_stream_is_drawn_only_by_its_derivation():
    with pytest.raises(ValueError, match="derived by numpy"):
        seeding.keys(0, Stream.EVAL_CLIENTS, np.arange(3))
    with pytest.raises(ValueError, match="not by a sampling kernel"):
        seeding.kernel_seed(0, Stream.SHUFFLE)


def test_every_draw_of_the_simulator_goes_through_seeding():
    # No ad-hoc derivation outside seeding.py: hashes, seeded generators and tags.
    pattern = re.compile(r"default_rng\(|manual_seed\(\s*(?!torch_seed|raw_seed|key\b|seed\b)"
                         r"|client_hash|splitmix64\(|0x[0-9A-Fa-f]{3,}")
    offenders = []
    for path in sorted((ROOT / "fastfair" / "sim").rglob("*.py")):
        if path.name == "seeding.py":
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if pattern.search(line) and "seeding" not in line:
                offenders.append(f"{path.name}:{n}: {line.strip()}")
    assert not offenders, "\n".join(offenders)
