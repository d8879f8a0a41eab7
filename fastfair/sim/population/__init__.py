"""Device populations on a virtual clock: their settings (:mod:`.settings`), the devices and
their online processes (:mod:`.devices`), the selection policies (:mod:`.selection`) and what a
configuration builds of them (:mod:`.build`). The settings import with the standard library
alone; the rest (NumPy) on first use."""

from fastfair._lazy import lazy_exports

#: The public names, listed once in __init__.pyi, each imported on first use (PEP 562).
__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
