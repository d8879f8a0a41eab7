r"""AAggFF's responses: the losses of a round's clients turned into responses in
:math:`[C_1, C_2]` through one of six CDFs (thesis Table 3.3, docs/algorithms.md §2.2), and the
checks of the options that choose them. Both AAggFF rules (:mod:`fastfair.aggregators.aaggff`)
respond this way."""

from __future__ import annotations

import math
from typing import Any, Optional, Tuple

import numpy as np

from fastfair.aggregators._checks import check_choice, check_scalar

CDFS = ("weibull", "frechet", "gumbel", "exponential", "logistic", "normal")
VARIANTS = ("paper", "reference_code")


def cdf_transform(x: np.ndarray, cdf: str = "weibull", *, normal_cdf: str = "paper",
                  out: Optional[np.ndarray] = None) -> np.ndarray:
    r"""One of the six response CDFs at ``x`` ``[m]`` (float64, ``x >= 0``).

    ============  ====================================
    ``cdf``       CDF(x)
    ============  ====================================
    weibull       :math:`1 - e^{-x^2}`
    frechet       :math:`e^{-1/x}` (0 at x = 0)
    gumbel        :math:`e^{-e^{-(x-1)}}`
    exponential   :math:`1 - e^{-x}`
    logistic      :math:`1/(1 + e^{-(x-1)})`
    normal        :math:`\Phi(x-1) = \tfrac12\mathrm{erfc}(-(x-1)/\sqrt2)`
    ============  ====================================

    ``normal_cdf="reference_code"`` gives the authors' code's "normal",
    :math:`\tfrac12(\mathrm{erfc}((x-1)/\sqrt2) + 1)`: decreasing in x, in (0.5, 1.5), not a CDF
    (docs/algorithms.md §2.2; the Berka runs used it). ``out`` (``[m]`` float64, may be ``x``
    itself) receives the result; the ufuncs run in place because a round is only m ~ 10^3 values
    and the per-call overhead dominates.
    """
    y = np.empty_like(x) if out is None else out
    if cdf == "weibull":      # -expm1(-x^2): no cancellation for small x
        np.multiply(x, x, out=y)
        np.negative(y, out=y)
        np.expm1(y, out=y)
        return np.negative(y, out=y)
    if cdf == "exponential":
        np.negative(x, out=y)
        np.expm1(y, out=y)
        return np.negative(y, out=y)
    if cdf == "frechet":
        with np.errstate(divide="ignore"):
            np.divide(-1.0, x, out=y)
        return np.exp(y, out=y)
    if cdf == "gumbel":
        np.subtract(1.0, x, out=y)
        np.exp(y, out=y)
        np.negative(y, out=y)
        return np.exp(y, out=y)
    if cdf == "logistic":
        np.subtract(1.0, x, out=y)
        np.exp(y, out=y)
        y += 1.0
        return np.divide(1.0, y, out=y)
    if cdf == "normal":
        # NumPy has no erfc: m scalar calls of the C library's (exact, and cheap beside a round).
        sign = 1.0 if normal_cdf == "reference_code" else -1.0
        z = (x - 1.0) * (sign / math.sqrt(2.0))
        y[...] = np.fromiter((math.erfc(v) for v in z), np.float64, count=z.shape[0])
        if normal_cdf == "reference_code":
            y += 1.0
        return np.multiply(y, 0.5, out=y)
    raise ValueError(f"cdf must be one of {', '.join(map(repr, CDFS))}; got {cdf!r}")


def cdf_responses(losses: np.ndarray, cdf: str = "weibull", c1: float = 0.0, c2: float = 1.0, *,
                  normal_cdf: str = "paper") -> np.ndarray:
    r"""Responses ``r`` ``[m]`` of the m participating clients (thesis eq. 3.8,
    docs/algorithms.md §2.2).

    .. math:: r_i = C_1 + (C_2 - C_1)\,\mathrm{CDF}(F_i / \bar F), \qquad
              \bar F = \tfrac1m \textstyle\sum_{j\in S} F_j

    ``losses`` ``[m]`` are non-negative. When they are all zero (so all equal) ``x = 1`` for every
    client, the limit of equal losses.
    """
    total = float(losses.sum())
    x = losses * (losses.shape[0] / total) if total > 0.0 else np.ones_like(losses)
    r = cdf_transform(x, cdf, normal_cdf=normal_cdf, out=x)
    r *= c2 - c1
    r += c1
    return r


def _check_range(response_range: Any) -> Optional[Tuple[float, float]]:
    if response_range is None:
        return None
    try:
        c1, c2 = response_range
    except (TypeError, ValueError):
        raise TypeError(f"response_range must be a pair (C1, C2) or None; got "
                        f"{response_range!r}") from None
    c1 = check_scalar(c1, "response_range[0] (C1)", lo=0.0)
    c2 = check_scalar(c2, "response_range[1] (C2)", lo=c1, lo_open=True)
    return c1, c2


def _check_normal(normal_cdf: Any, cdf: str) -> str:
    normal_cdf = check_choice(normal_cdf, "normal_cdf", VARIANTS)
    if normal_cdf == "reference_code" and cdf != "normal":
        raise ValueError(f"normal_cdf='reference_code' only changes cdf='normal'; got cdf={cdf!r}"
                         " (drop normal_cdf or use cdf='normal')")
    return normal_cdf


def _check_losses(losses: np.ndarray) -> None:
    if (losses < 0).any():
        pos = int(np.flatnonzero(losses < 0)[0])
        raise ValueError(f"losses must be non-negative (AAggFF divides them by their mean); got "
                         f"{losses[pos]} at position {pos}")
