"""Models over flat parameters, one row per client, so that a cohort trains as one program:
logistic regression and the MLP (:mod:`.flat`), any ``torch.nn.Module`` (:mod:`.module`), the
cohort's dropout and batch norm (:mod:`.layers`) and the papers' networks by name (:mod:`.zoo`)."""

from fastfair.sim.models.flat import MLP, FlatModel, LogisticRegression, check_model, make_model
from fastfair.sim.models.module import ModuleModel
from fastfair.sim.models.zoo import MODELS, build_model

__all__ = ["FlatModel", "LogisticRegression", "MLP", "MODELS", "ModuleModel", "build_model",
           "check_model", "make_model"]
