"""Array factories for every supported framework and dtype, and the CUDA skip marker."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")

DTYPES = ["float32", "float64", "float16", "bfloat16"]


def has_cuda() -> bool:
    """A usable GPU and a CUDA build of fastfair."""
    import fastfair

    return bool(fastfair.build_info()["cuda"]) and torch.cuda.is_available()


requires_cuda = pytest.mark.skipif(not has_cuda(), reason="needs a GPU and a CUDA build")


def make_array(values: np.ndarray, dtype: str, framework: str = "numpy", device: str = "cpu"):
    """``values`` in the given framework/dtype/device (NumPy has no bfloat16: torch is used)."""
    if framework == "numpy" and dtype != "bfloat16" and device == "cpu":
        return np.asarray(values).astype(dtype)
    if framework == "cupy":
        cupy = pytest.importorskip("cupy")
        return cupy.asarray(values).astype(dtype)
    return torch.as_tensor(np.asarray(values)).to(dtype=getattr(torch, dtype), device=device)
