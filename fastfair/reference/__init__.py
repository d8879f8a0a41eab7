"""Readable float64 NumPy versions of every fastfair kernel and rule: the test oracles and the
baselines every benchmark is compared with. They favour clarity over speed."""

from fastfair.reference import aggregators
from fastfair.reference.dr import dr_gradient, dr_lazy_step
from fastfair.reference.label_segments import label_segments
from fastfair.reference.normal_segments import normal_segments
from fastfair.reference.ons import (
    kkt_residual,
    online_newton_step,
    simplex_qp_cvxpy,
    simplex_qp_enumerate,
)
from fastfair.reference.sampling import sample_available, sample_clients
from fastfair.reference.sgld import cosine_beta_schedule, fedevg_server_step, sgld_step
from fastfair.reference.simplex import project_simplex
from fastfair.reference.softmax import eg_step, logsumexp, softmax
from fastfair.reference.softmax_regression import softmax_regression_sgd
from fastfair.reference.superfed import superfed_gradients
from fastfair.reference.weighted_average import weighted_average

__all__ = [
    "aggregators", "dr_gradient", "dr_lazy_step", "eg_step", "kkt_residual", "label_segments",
    "logsumexp",
    "normal_segments", "online_newton_step", "project_simplex", "sample_available",
    "sample_clients", "simplex_qp_cvxpy", "simplex_qp_enumerate", "softmax",
    "softmax_regression_sgd", "weighted_average", "cosine_beta_schedule", "fedevg_server_step",
    "sgld_step", "superfed_gradients",
]
