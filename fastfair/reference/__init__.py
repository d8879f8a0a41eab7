"""Readable float64 NumPy versions of every fastfair kernel: the test oracles and the baselines
every benchmark is compared with. They favour clarity over speed."""

from fastfair.reference.weighted_average import weighted_average

__all__ = ["weighted_average"]
from fastfair.reference.ons import (kkt_residual, online_newton_step, simplex_qp_cvxpy,
                                    simplex_qp_enumerate)

__all__ += ["kkt_residual", "online_newton_step", "simplex_qp_cvxpy", "simplex_qp_enumerate"]
