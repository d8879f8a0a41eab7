"""A cohort's local training and evaluation: their settings (:mod:`.settings`), the step
schedule (:mod:`.schedule`), the runs a training pass serves (:mod:`.lanes`), training by
kernel or autograd (:mod:`.local`) and evaluation in large batches (:mod:`.evaluate`). The
settings import without torch; the rest on first use."""

from fastfair._lazy import lazy_exports

#: The public names, listed once in __init__.pyi, each imported on first use (PEP 562).
__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
