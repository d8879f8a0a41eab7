"""Device populations on a virtual clock: their settings (:mod:`.settings`), the devices and
their online processes (:mod:`.devices`), the selection policies (:mod:`.selection`) and what a
configuration builds of them (:mod:`.build`). The settings import with the standard library
alone; the rest (NumPy) on first use."""

from typing import TYPE_CHECKING

from fastfair._lazy import lazy_exports

if TYPE_CHECKING:  # the names as type checkers see them (tests/test_layout.py: the same)
    from fastfair.sim.population.build import (  # noqa: F401
        PopulationOptions,
        build_population,
        check_population,
        time_to_accuracy,
        with_population,
        with_tiers,
    )
    from fastfair.sim.population.devices import (  # noqa: F401
        DEFAULT_TIERS,
        PROCESSES,
        Population,
        Tier,
    )
    from fastfair.sim.population.selection import (  # noqa: F401
        POLICIES,
        Policy,
        PopulationAvailability,
        keep,
    )

#: Each submodule and the public names it defines, imported on first use (PEP 562).
_EXPORTS = {
    "fastfair.sim.population.build": (
        "PopulationOptions", "build_population", "check_population",
        "time_to_accuracy", "with_population", "with_tiers"),
    "fastfair.sim.population.devices": ("DEFAULT_TIERS", "PROCESSES", "Population", "Tier"),
    "fastfair.sim.population.selection": ("POLICIES", "Policy", "PopulationAvailability", "keep"),
}
__all__ = sorted(name for names in _EXPORTS.values() for name in names)
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
