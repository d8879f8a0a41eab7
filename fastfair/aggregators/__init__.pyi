"""The public names of this package, each imported on first use by :mod:`fastfair._lazy`."""

from fastfair.aggregators.aaggff import AAggFFD as AAggFFD
from fastfair.aggregators.aaggff import AAggFFS as AAggFFS
from fastfair.aggregators.afl import AFL as AFL
from fastfair.aggregators.base import FORMAT_VERSION as FORMAT_VERSION
from fastfair.aggregators.base import Aggregator as Aggregator
from fastfair.aggregators.bounds import UpdateBound as UpdateBound
from fastfair.aggregators.fedavg import FairAvg as FairAvg
from fastfair.aggregators.fedavg import FedAvg as FedAvg
from fastfair.aggregators.fedavg import FedProx as FedProx
from fastfair.aggregators.fedcvar import FedCVaRAvg as FedCVaRAvg
from fastfair.aggregators.fedmaba import FedMABA as FedMABA
from fastfair.aggregators.fedmgda import FedMGDA as FedMGDA
from fastfair.aggregators.objectives import ClientObjective as ClientObjective
from fastfair.aggregators.over_groups import OverGroups as OverGroups
from fastfair.aggregators.over_groups import ReportedGroups as ReportedGroups
from fastfair.aggregators.propfair import PropFair as PropFair
from fastfair.aggregators.qfedavg import QFedAvg as QFedAvg
from fastfair.aggregators.registry import RULES as RULES
from fastfair.aggregators.registry import build as build
from fastfair.aggregators.registry import build_server_optimizer as build_server_optimizer
from fastfair.aggregators.server_opt import SERVER_OPTIMIZERS as SERVER_OPTIMIZERS
from fastfair.aggregators.server_opt import SGD as SGD
from fastfair.aggregators.server_opt import FedAdagrad as FedAdagrad
from fastfair.aggregators.server_opt import FedAdam as FedAdam
from fastfair.aggregators.server_opt import FedAvgM as FedAvgM
from fastfair.aggregators.server_opt import FedYogi as FedYogi
from fastfair.aggregators.server_opt import ServerOptimizer as ServerOptimizer
from fastfair.aggregators.term import TERM as TERM

from . import registry as registry
