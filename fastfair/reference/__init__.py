"""Readable float64 NumPy versions of every fastfair kernel: the test oracles and the baselines
every benchmark is compared with. They favour clarity over speed."""

from fastfair.reference.weighted_average import weighted_average

__all__ = ["weighted_average"]
from fastfair.reference import aggregators  # noqa: E402  (rules; one module of oracles)

__all__ += ["aggregators"]
