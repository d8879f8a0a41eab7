"""The public names of this package, each imported on first use by :mod:`fastfair._lazy`."""

from fastfair.sim.population.build import PopulationOptions as PopulationOptions
from fastfair.sim.population.build import build_population as build_population
from fastfair.sim.population.build import check_population as check_population
from fastfair.sim.population.build import time_to_accuracy as time_to_accuracy
from fastfair.sim.population.build import with_population as with_population
from fastfair.sim.population.build import with_tiers as with_tiers
from fastfair.sim.population.devices import DEFAULT_TIERS as DEFAULT_TIERS
from fastfair.sim.population.devices import PROCESSES as PROCESSES
from fastfair.sim.population.devices import Population as Population
from fastfair.sim.population.devices import Tier as Tier
from fastfair.sim.population.selection import POLICIES as POLICIES
from fastfair.sim.population.selection import Policy as Policy
from fastfair.sim.population.selection import PopulationAvailability as PopulationAvailability
from fastfair.sim.population.selection import keep as keep
