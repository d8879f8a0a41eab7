"""Round runners: what every runner shares (:mod:`.runner`), what a configuration builds
(:mod:`.build`), who is available (:mod:`.availability`), the rules' engine (:mod:`.engine`),
FedEvg (:mod:`.fedevg`), SuPerFed (:mod:`.superfed`), Ditto (:mod:`.ditto`) and the runner of
every name (:mod:`.registry`)."""

from fastfair._lazy import lazy_exports

#: The public names, listed once in __init__.pyi, each imported on first use (PEP 562).
__getattr__, __dir__, __all__ = lazy_exports(__name__, __file__)
