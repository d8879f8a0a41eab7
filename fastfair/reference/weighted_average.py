"""Reference weighted averaging."""

from __future__ import annotations

from typing import Any, List, Optional, Sequence, Union

import numpy as np


def to_float64(x: Any) -> np.ndarray:
    """Any CPU array (NumPy, torch, DLPack; bfloat16 included) as a float64 NumPy array."""
    if type(x).__module__.split(".")[0] == "torch":
        return x.detach().to("cpu").double().numpy()
    return np.asarray(x, dtype=np.float64)


def weighted_average(X: Union[Any, Sequence[Sequence[Any]]], w: Any, *,
                     base: Optional[Union[Any, Sequence[Any]]] = None,
                     lr: float = 1.0) -> Union[np.ndarray, List[np.ndarray]]:
    r"""``sum_i w_i X_i`` in float64, or ``base - lr * sum_i w_i X_i`` when ``base`` is given.

    ``X`` is ``[N, *S]`` or a list of N lists of L arrays; returns float64 NumPy array(s).
    """
    weights = np.asarray(w, dtype=np.float64)
    if isinstance(X, (list, tuple)):
        sums = [sum(weights[i] * to_float64(client[l]) for i, client in enumerate(X))
                for l in range(len(X[0]))]
        if base is None:
            return sums
        return [to_float64(b) - lr * s for b, s in zip(base, sums)]
    total = np.tensordot(weights, to_float64(X), axes=(0, 0))
    return total if base is None else to_float64(base) - lr * total
