"""Readable float64 NumPy versions of every fastfair kernel: the test oracles and the baselines
every benchmark is compared with. They favour clarity over speed."""

from fastfair.reference.weighted_average import weighted_average

__all__ = ["weighted_average"]
from fastfair.reference.softmax import eg_step, logsumexp, softmax
from fastfair.reference.dr import dr_gradient, dr_lazy_step
from fastfair.reference.simplex import project_simplex
from fastfair.reference.sampling import sample_available, sample_clients

__all__ += ["eg_step", "logsumexp", "softmax", "dr_gradient", "dr_lazy_step", "project_simplex",
            "sample_available", "sample_clients"]
