"""Models over flat parameters, one row per client, so that a cohort trains as one program:
logistic regression and the MLP (:mod:`.flat`), any ``torch.nn.Module`` (:mod:`.module`), the
cohort's dropout and batch norm (:mod:`.layers`) and the papers' networks by name (:mod:`.zoo`)."""

from fastfair._lazy import lazy_exports

#: The public names, listed once in __init__.pyi, each imported on first use (PEP 562).
__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
