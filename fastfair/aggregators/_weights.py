r"""Normalised weights over the m clients of a round, free of overflow: FedAvg's counts and the
rules written as one exponentiated-gradient step from them (docs/algorithms.md §2.6).

Counts as large as the float64 range (``n = [1e308, 1e308]``), responses whose exponential or
product with the counts overflows, and counts whose sum overflows all give the weights the exact
formula defines; a round whose weights are all 0 is left to the rule (None).
"""

from __future__ import annotations

from typing import Optional

import numpy as np


def normalize(scores: np.ndarray) -> Optional[np.ndarray]:
    r"""``scores / sum(scores)`` ``[m]`` for finite non-negative ``scores`` ``[m]``; None when
    they are all 0.

    Both are first scaled by the power of two just above the largest score, exactly (no
    rounding), so the sum is at most m and never overflows; wherever the unscaled division does
    not overflow or underflow, the result is bit-identical to it.
    """
    top = float(scores.max())
    if top == 0.0:
        return None
    scaled = np.ldexp(scores, -np.frexp(top)[1])
    return scaled / scaled.sum()


def eg_weights(response: np.ndarray, counts: Optional[np.ndarray],
               what: str) -> Optional[np.ndarray]:
    r"""One exponentiated-gradient step from the sample-count weights,

    .. math:: c_k = \frac{n_k\, e^{r_k}}{\sum_{j \in S} n_j\, e^{r_j}},

    in log space, shifted by the largest :math:`\log n_k + r_k`, so that neither the counts, nor
    the exponentials, nor their products or sum overflow.

    ``response`` ``[m]``: the :math:`r_k`, finite or ``-inf`` (weight 0); ``what`` names the
    expression it comes from in the error raised for ``+inf`` or NaN (an overflow of it, e.g.
    ``"tilt * losses"``). ``counts`` ``[m]``: non-negative :math:`n_k` (a client with 0 gets 0),
    or None for uniform n. Returns None when every weight is 0.
    """
    bad = np.isnan(response) | (response == np.inf)
    if bad.any():
        pos = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{what} overflows float64 at position {pos} (got {response[pos]}): "
                         "the weights are undefined")
    score = response
    if counts is not None:
        with np.errstate(divide="ignore"):
            score = score + np.log(counts)
    top = float(score.max())
    if top == -np.inf:
        return None
    e = np.exp(score - top)
    return e / e.sum()
