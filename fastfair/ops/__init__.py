"""Compiled kernels of fastfair, one thin typed wrapper per op.

Every op takes NumPy arrays, torch tensors, CuPy arrays or any ``__dlpack__`` producer and
returns results in the framework (and on the device) of its inputs.

What an op writes (``out=``, and state it updates in place) must not share memory with any other
argument of the call: such a call raises ``ValueError`` naming both ("out overlaps X; pass a
separate buffer") before anything is written. The one exception is an op's documented in-place
form, where the output is the very same array as the input (``sgld_step`` and
``fedevg_server_step`` with ``out=x``, their default).
"""

from fastfair.ops.dr import dr_gradient, dr_lazy_step
from fastfair.ops.label_segments import label_segments
from fastfair.ops.normal_segments import normal_segments
from fastfair.ops.ons import OnlineNewtonStep, QpCertificate, ons_project, ons_project_batched
from fastfair.ops.sampling import sample_available, sample_clients
from fastfair.ops.sgld import cosine_beta_schedule, fedevg_server_step, sgld_step
from fastfair.ops.simplex import project_simplex
from fastfair.ops.softmax import eg_step, logsumexp, softmax
from fastfair.ops.softmax_regression import softmax_regression_sgd
from fastfair.ops.superfed import (
    SegmentLayout,
    orthogonality_coefficients,
    prox_coefficients,
    superfed_mix,
    superfed_reduce,
    superfed_step,
)
from fastfair.ops.weighted_average import Accumulator, weighted_average

__all__ = [
    "Accumulator", "OnlineNewtonStep", "QpCertificate", "dr_gradient", "dr_lazy_step",
    "eg_step", "label_segments", "logsumexp", "normal_segments", "ons_project",
    "ons_project_batched", "project_simplex", "sample_available", "sample_clients", "softmax",
    "softmax_regression_sgd", "weighted_average", "cosine_beta_schedule", "fedevg_server_step",
    "sgld_step", "SegmentLayout", "orthogonality_coefficients", "prox_coefficients",
    "superfed_mix", "superfed_reduce", "superfed_step",
]
