"""Experiments (several rules on identical data, :mod:`.experiment`) and sweeps (rules x seeds x
grids as one batched program, :mod:`.sweep`), over what they share: checks, the run folder,
progress, callbacks and checkpoints (:mod:`.common`), and a run folder read back
(:func:`~.loading.load_run`)."""

from fastfair._lazy import lazy_exports

#: The public names, listed once in __init__.pyi, each imported on first use (PEP 562).
__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
