"""Compiled kernels of fastfair, one thin typed wrapper per op.

Every op takes NumPy arrays, torch tensors, CuPy arrays or any ``__dlpack__`` producer and
returns results in the framework (and on the device) of its inputs.
"""

from fastfair.ops.weighted_average import Accumulator, weighted_average

__all__ = ["Accumulator", "weighted_average"]
from fastfair.ops.ons import OnlineNewtonStep, QpCertificate, ons_project, ons_project_batched

__all__ += ["OnlineNewtonStep", "QpCertificate", "ons_project", "ons_project_batched"]
