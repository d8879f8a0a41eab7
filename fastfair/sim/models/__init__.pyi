"""The public names of this package, each imported on first use by :mod:`fastfair._lazy`."""

from fastfair.sim.models.catalog import build_model as build_model
from fastfair.sim.models.flat import MLP as MLP
from fastfair.sim.models.flat import FlatModel as FlatModel
from fastfair.sim.models.flat import LogisticRegression as LogisticRegression
from fastfair.sim.models.flat import check_model as check_model
from fastfair.sim.models.flat import make_model as make_model
from fastfair.sim.models.module import ModuleModel as ModuleModel
from fastfair.sim.names import MODELS as MODELS
