"""Shared fixtures: a seeded generator and the CPU instruction-set copies of the kernels."""

from __future__ import annotations

import numpy as np
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(20241123)


@pytest.fixture(params=["base", "avx2", "avx512"])
def cpu_isa(request):
    """Runs the test once per CPU instruction-set copy of the kernels this machine has (skipping
    the levels it lacks), then restores the level in use."""
    from fastfair import _C

    before = _C.build_info()["cpu_isa"]
    try:
        if _C._set_cpu_isa(request.param) != request.param:
            pytest.skip(f"this CPU or build has no {request.param} kernels")
        yield request.param
    finally:
        _C._set_cpu_isa(before)
