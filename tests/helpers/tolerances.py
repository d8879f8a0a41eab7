"""The one table of numerical tolerances used by every test, and the comparison built on it.

Errors of a weighted sum grow with the magnitude of its terms, not of its result, so comparisons
take a ``scale`` (for a sum, ``sum_i |w_i| |X_i|``) and allow ``rtol * scale`` on top of the
rounding of the result itself to its storage dtype.
"""

from __future__ import annotations

import numpy as np

# Per storage dtype: (relative tolerance of results, unit roundoff of the storage format).
TOLERANCES = {
    "float64": (1e-12, 2.0 ** -53),
    "float32": (2e-6, 2.0 ** -24),
    "float16": (2e-6, 2.0 ** -11),   # accumulation is float32; only the final store is float16
    "bfloat16": (2e-6, 2.0 ** -8),
}
# Per storage dtype: the spacing of its subnormal numbers. A result that rounds to a subnormal
# is off by up to half of it, whatever its magnitude (float16's 6e-8 is reached by sums of a few
# terms that cancel).
SUBNORMAL_SPACING = {"float64": 2.0 ** -1074, "float32": 2.0 ** -149, "float16": 2.0 ** -24,
                     "bfloat16": 2.0 ** -133}


def to_numpy64(x) -> np.ndarray:
    """Any CPU array (NumPy, torch incl. bfloat16) as float64 NumPy."""
    if type(x).__module__.split(".")[0] == "torch":
        return x.detach().cpu().double().numpy()
    return np.asarray(x, dtype=np.float64)


def assert_close(actual, expected, dtype: str, scale=None) -> None:
    """Asserts |actual - expected| <= rtol * scale + 2 * u * |expected| + s / 2 elementwise
    (``s``: the dtype's subnormal spacing).

    ``scale`` defaults to |expected|; pass the magnitude of the summed terms for sums.
    """
    rtol, unit = TOLERANCES[dtype]
    a, e = to_numpy64(actual), to_numpy64(expected)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    s = np.abs(e) if scale is None else to_numpy64(scale)
    bound = (rtol * s + 2 * unit * np.abs(e) + SUBNORMAL_SPACING[dtype] / 2
             + np.finfo(np.float64).tiny)
    err = np.abs(a - e)
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else ()
    assert np.all(err <= bound), (f"{dtype}: error {err[worst]:.3g} > bound {bound[worst]:.3g} "
                                  f"at {worst}")

# Aggregation rules (float64 state and coefficients): absolute tolerance on coefficients and states
# against the golden vectors of docs/algorithms.md, against the float64 references over many rounds,
# and for an iterative QP solution against its enumerated KKT point.
RULE_TOLERANCES = {"golden": 1e-12, "reference": 1e-10, "qp": 1e-10}


def assert_rule_close(actual, expected, kind: str = "reference") -> None:
    """Asserts max |actual - expected| <= RULE_TOLERANCES[kind] (float64 rules)."""
    a, e = to_numpy64(actual), to_numpy64(expected)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    err = float(np.max(np.abs(a - e))) if a.size else 0.0
    assert err <= RULE_TOLERANCES[kind], f"{kind}: max error {err:.3g} > {RULE_TOLERANCES[kind]}"


# Exponentials (softmax, EG, lazy weights): an error of e in the argument z - lse is a relative
# error e of the result, and forming z - lse in the storage precision costs up to a few units of
# roundoff times |z - lse|. Results below the smallest normal number may be flushed to zero.
EXP_ARGUMENT_ULPS = 4
SMALLEST_NORMAL = {"float64": 2.2250738585072014e-308, "float32": 1.1754943508222875e-38}


def assert_softmax_close(actual, expected, dtype: str, argument) -> None:
    """Asserts |actual - expected| <= (rtol + EXP_ARGUMENT_ULPS * u * |argument|) * expected +
    the smallest normal of ``dtype``, where ``argument`` is the exact exponent (z - lse)."""
    rtol, unit = TOLERANCES[dtype]
    a, e = to_numpy64(actual), to_numpy64(expected)
    assert a.shape == e.shape, f"shape {a.shape} != {e.shape}"
    arg = np.abs(np.nan_to_num(to_numpy64(argument), neginf=0.0))
    bound = (rtol + EXP_ARGUMENT_ULPS * unit * arg) * e + SMALLEST_NORMAL[dtype]
    err = np.abs(a - e)
    worst = np.unravel_index(np.argmax(err - bound), err.shape) if err.size else ()
    assert np.all(err <= bound), (f"{dtype}: error {err[worst]:.3g} > bound {bound[worst]:.3g} "
                                  f"at {worst}")

# Simplex QPs and the Online Newton Step (float64 throughout).
QP_TOLERANCES = {
    # docs/algorithms.md §2.4.3 prints the ONS golden vectors to six decimals
    "golden_printed": 5e-7,
    # against support enumeration (fastfair.reference.ons) on the same inputs
    "golden": 1e-9,
    "oracle": 1e-10,         # against support enumeration, well-conditioned problems
    "kkt": 1e-9,             # scaled KKT residual of every returned point
    # cvxpy's solvers stop at about this accuracy (docs/algorithms.md §2.4.2)
    "cvxpy": 1e-6,
    "simplex_sum": 1e-12,    # |sum(p) - 1| of every returned point
    "fista": 1e-9,           # FISTA + support polish against the exact solver
}

# Normal variates of the float32 SGLD path (polynomial log / sin / cos) against the float64
# reference stream: absolute, for |z| <= 5.9.
GAUSSIAN_F32_ATOL = 2e-5

# Local SGD of logistic regression in float32, the CUDA kernel against the CPU kernel: both run
# the same minibatches with the sums in the same order, and differ by their exponentials and the
# order of the softmax sums, which several steps compound (relative, absolute on the parameters;
# relative on the received loss, a float64 sum of float32 terms).
SOFTMAX_REGRESSION_CUDA = {"rtol": 1e-4, "atol": 1e-5, "loss_rtol": 1e-6}
