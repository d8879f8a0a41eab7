"""Every knob of a simulation, checked (types and ranges) when the configuration is made, and
documented in its field's metadata (:func:`doc`), from which ``fastfair simulate`` and
``fastfair sweep`` make their options."""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Dict, Optional

from fastfair._options import check_name, check_options, dataclass_options, plain
from fastfair.aggregators.names import (
    NORM_REFERENCES,
    OBJECTIVE_NAMES,
    PRIORS,
    RULE_NAMES,
    SERVER_OPTIMIZER_NAMES,
    SHARES,
)
from fastfair.methods import METHODS
from fastfair.sim import names
from fastfair.sim.lr_schedule import parse_lr_schedule, round_lr
from fastfair.sim.names import AVAILABILITY, POLICIES

if TYPE_CHECKING:
    from fastfair.sim.data.base import FederatedDataset

DATASETS = tuple(names.list_datasets())
MODELS = tuple(names.list_models())
DEVICE = re.compile(r"cpu|cuda(:\d+)?")
PARTITIONS = ("iid", "dirichlet", "pathological")
#: The values of ``adult_features``: the encodings of UCI Adult (:mod:`fastfair.sim.data.adult`).
ADULT_FEATURES = ("all", "categorical")
FAIR_OVER = ("clients", "groups")
#: The values of ``precision``: the arithmetic of local training's forward and backward passes.
PRECISIONS = ("fp32", "bf16", "fp16")
GENERATED = tuple(n for n in DATASETS if names.get_dataset(n).family == "generated")
VISION = tuple(n for n in DATASETS if names.get_dataset(n).family == "vision")
#: The sections fields are listed under (``fastfair simulate --help`` shows one per section).
RULES, DATA, TRAINING = "rules", "population and data", "model and training"
EVALUATION, EXECUTION = "evaluation and output", "execution"


def doc(group: str, help: str, **more: Any) -> Dict[str, Any]:
    """A field's documentation, as its ``metadata``: ``help`` (its line in ``--help``),
    ``group`` (the section it is listed under) and, in ``more``, ``choices`` (a tuple of the
    names, from the plain name tables the layers above check theirs against) and ``metavar``
    (the value's name in ``--help``). The command line makes one option of each field from
    these (:mod:`fastfair.cli_options`)."""
    return {"help": help, "group": group, **more}


def _named(field_name: str) -> str:
    """A field as its errors name it: the field and its command-line option,
    ``"per_round (--per-round)"``."""
    return f"{field_name} (--{field_name.replace('_', '-')})"


@dataclass
class SimulationConfig:
    """Every knob of one run. The defaults (100 Synthetic(1, 1) clients, 10 per round, 200
    rounds) compare rules in seconds per rule on 2 cores.

    ``rule`` is a rule of :mod:`fastfair.aggregators.registry` or a method (``fedevg``,
    ``superfed-mm``, ``superfed-lm``) with its ``rule_options``; ``objective`` (None: the
    rule's own) is what the clients minimise, with ``objective_options``
    (:mod:`fastfair.aggregators.compose`); ``server_optimizer`` (``sgd`` by default) takes the
    server step of the rules, with ``server_options`` and learning rate ``server_lr`` (None:
    the optimiser's own default). Data sets read from files take
    ``data_dir`` (vision ones may ``download`` missing files); ``model`` None is the data set's
    default (:func:`fastfair.sim.names.get_dataset`). Every value is checked here:
    a wrong type is a ``TypeError`` and a value out of range a ``ValueError``, both naming the
    field.
    """

    rule: str = field(default="fedavg", metadata=doc(RULES, "the rule or method"))
    rule_options: Dict[str, Any] = field(default_factory=dict,
                                         metadata=doc(RULES, "the rule's options"))
    # the client objective, an axis apart from the rule (fastfair.aggregators.compose)
    objective: Optional[str] = field(default=None, metadata=doc(
        RULES, "what the clients minimise under any rule: plain, proximal (FedProx's term, "
        "option mu) or propfair (options M, epsilon, extension); none: the rule's own "
        "(docs/algorithms.md lists the combinations)",
        choices=OBJECTIVE_NAMES))
    objective_options: Dict[str, Any] = field(default_factory=dict, metadata=doc(
        RULES, "an objective option, e.g. mu=0.01 (repeatable)"))
    dataset: str = field(default="synthetic", metadata=doc(
        DATA, "the data set; all but the generated ones (" + ", ".join(GENERATED) + ") are read "
        "from --data-dir (see docs/data.md)", choices=DATASETS))
    clients: int = field(default=100, metadata=doc(DATA, "K, the client population"))
    per_round: int = field(default=10, metadata=doc(DATA, "m, clients per round"))
    rounds: int = field(default=200, metadata=doc(DATA, "rounds of training"))
    seed: int = field(default=0, metadata=doc(
        RULES, "the seed of the data, the models and every draw of the run"))
    # fairness over the groups the data set knows (fastfair.aggregators.OverGroups)
    fair_over: str = field(default="clients", metadata=doc(
        RULES, "what the rule weighs: the clients, or the groups the data set knows (the "
        "grouped workload's, npz-clients' group entries, --groups-file, --group-by-class); "
        "over groups a client gets its group's coefficient times its share of the group",
        choices=FAIR_OVER))
    group_prior: str = field(default="uniform", metadata=doc(
        RULES, "--fair-over groups: the groups' weights a rule that does not adapt reproduces: "
        "uniform (group-balanced) or size (each group's share of the samples: FedAvg)",
        choices=PRIORS))
    group_share: str = field(default="samples", metadata=doc(
        RULES, "--fair-over groups: a client's share of its group's coefficient, by its samples "
        "or uniform", choices=SHARES))
    # Synthetic(alpha, beta)
    synthetic_alpha: float = field(default=1.0, metadata=doc(
        DATA, "synthetic: how far the clients' models differ"))
    synthetic_beta: float = field(default=1.0, metadata=doc(
        DATA, "synthetic: how far the clients' features differ"))
    max_samples: int = field(default=500, metadata=doc(
        DATA, "cap on a synthetic or grouped client's samples"))
    # grouped: latent groups of power-law sizes, each a shift of a common model
    groups: int = field(default=10, metadata=doc(
        DATA, "grouped: latent client groups (each a shift of a common model)"))
    group_power: float = field(default=1.5, metadata=doc(
        DATA, "grouped: group g holds a share proportional to (g + 1)^-power"))
    group_shift: float = field(default=1.0, metadata=doc(
        DATA, "grouped: how far each group's model and features move"))
    # data read from files (every data set but the generated ones)
    data_dir: Optional[str] = field(default=None, metadata=doc(
        DATA, "the folder of a data set's files in their standard format", metavar="DIR"))
    groups_file: Optional[str] = field(default=None, metadata=doc(
        DATA, "a CSV of client,group rows (a client's index, or a LEAF user's name): the "
        "clients' groups, for per-group accuracy and --fair-over groups", metavar="CSV"))
    group_by_class: bool = field(default=False, metadata=doc(
        DATA, "digits and the vision data sets: group the clients by their most frequent "
        "training label"))
    download: bool = field(default=False, metadata=doc(
        DATA, ", ".join(VISION) + ": fetch missing files into --data-dir with torchvision's "
        "downloader"))
    # digits and the vision data sets
    partition: str = field(default="dirichlet", metadata=doc(
        DATA, "how digits, the vision data sets, image-folder and adult are split across "
        "clients: " + ", ".join(PARTITIONS) + "; adult also column:NAME (a client per value) "
        "and column:NAME=VALUE[,VALUE] (those rows and the rest; column:education=Doctorate is "
        "AFL's split)", metavar="SCHEME"))
    dirichlet_alpha: float = field(default=0.3, metadata=doc(
        DATA, "dirichlet partition: the concentration of each client's label shares (smaller: "
        "more skewed)"))
    classes_per_client: int = field(default=2, metadata=doc(
        DATA, "pathological partition: the labels each client holds"))
    adult_features: str = field(default="all", metadata=doc(
        DATA, "adult: all (numeric columns standardised and categorical ones one-hot, 108 "
        "features) or categorical (the 8 categorical columns one-hot, a missing value all "
        "zeros: 99 features, the q-FFL authors' encoding)", choices=ADULT_FEATURES))
    # model and local training
    model: Optional[str] = field(default=None, metadata=doc(
        TRAINING, "None: the data set's default (" + ", ".join(
            f"{n}: {names.get_dataset(n).default_model}" for n in DATASETS) + ")",
        choices=MODELS))
    hidden: int = field(default=64, metadata=doc(TRAINING, "MLP hidden width"))
    epochs: int = field(default=1, metadata=doc(TRAINING, "local epochs E"))
    local_steps: Optional[int] = field(default=None, metadata=doc(
        TRAINING, "H local minibatch steps (overrides --epochs)"))
    batch_size: int = field(default=32, metadata=doc(TRAINING, "local minibatch size"))
    lr: float = field(default=0.1, metadata=doc(TRAINING, "client learning rate"))
    lr_decay: float = field(default=1.0, metadata=doc(TRAINING, "per-round lr factor"))
    lr_schedule: Optional[str] = field(default=None, metadata=doc(
        TRAINING, "the client lr over rounds, in place of --lr-decay: step:gamma=G,every=N "
        "(lr G^floor((t-1)/N)) or cosine:min=M[,rounds=T] (from lr to M over T rounds, default "
        "--rounds); docs/simulator.md", metavar="KIND:KEY=VALUE,..."))
    # server
    server_lr: Optional[float] = field(default=None, metadata=doc(
        TRAINING, "the server optimizer's learning rate; none: its documented default (1 for "
        "sgd and fedavgm, 0.01 for fedadam, fedyogi and fedadagrad; docs/defaults.md)"))
    server_optimizer: str = field(default="sgd", metadata=doc(
        TRAINING, "the server step of the rules",
        choices=SERVER_OPTIMIZER_NAMES))
    server_options: Dict[str, Any] = field(default_factory=dict, metadata=doc(
        TRAINING, "a server optimizer option, e.g. momentum=0.5 (repeatable)"))
    # the opt-in bound on one client's influence (fastfair.aggregators.bounds, shared with the
    # Flower strategy)
    max_update_norm: Optional[float] = field(default=None, metadata=doc(
        RULES, "clip each client's update to this norm before the rule sees it: a multiple of "
        "the round's median update norm, or with --update-norm-reference absolute a norm in "
        "the parameters' units (default: no clip)"))
    update_norm_reference: str = field(default="median", metadata=doc(
        RULES, "what --max-update-norm multiplies: the round's median update norm, or "
        "nothing (absolute)", choices=NORM_REFERENCES))
    max_samples_per_client: Optional[float] = field(default=None, metadata=doc(
        RULES, "count a client's samples as at most this many when rules weigh by counts "
        "(default: no cap)"))
    # availability and evaluation
    availability: str = field(default="uniform", metadata=doc(
        DATA, "which clients can take part in a round",
        choices=AVAILABILITY))
    availability_options: Dict[str, Any] = field(default_factory=dict, metadata=doc(
        DATA, "an availability option, e.g. prob=0.5 (repeatable)"))
    # a device population on a virtual clock (fastfair.sim.population; docs/populations.md)
    population: Optional[str] = field(default=None, metadata=doc(
        DATA, "devices (low/mid/high tiers of speeds, bandwidths, dropouts) or a CSV of tiers or "
        "clients: rounds then run on a virtual clock; the tiers are the groups of a data set "
        "without groups", metavar="devices|CSV"))
    population_options: Dict[str, Any] = field(default_factory=dict, metadata=doc(
        DATA, "a population option, e.g. process=diurnal, shares=[0.3,0.5,0.2] (repeatable)"))
    policy: str = field(default="all", metadata=doc(
        DATA, "with a population: wait for all invited, overselect (invite ceil(m(1+f)), keep "
        "the first m) or deadline (keep those done by --deadline)",
        choices=POLICIES))
    over_select: float = field(default=0.0, metadata=doc(
        DATA, "f: the share of per_round invited on top (overselect, deadline)"))
    deadline: Optional[float] = field(default=None, metadata=doc(
        DATA, "the deadline policy's seconds of virtual time per round", metavar="SECONDS"))
    eval_every: int = field(default=5, metadata=doc(EVALUATION, "evaluate every N rounds"))
    eval_clients: int = field(default=1000, metadata=doc(
        EVALUATION, "clients evaluated (a fixed random subset when K is larger)"))
    class_metrics: bool = field(default=False, metadata=doc(
        EVALUATION, "also report top-5 accuracy (acc5_*, more than 5 classes) and the expected "
        "and maximum calibration errors (ece_*, mce_*; 15 confidence bins) of the global model "
        "on every evaluation client's test samples: one more inference pass an evaluation"))
    # fraction of each client's training samples held out to choose hyperparameters on (0: none)
    validation: float = field(default=0.0, metadata=doc(
        EVALUATION, "hold out this fraction of each client's training samples as a validation "
        "split (val_* metrics; a sweep chooses grid points on it)", metavar="FRACTION"))
    eval_average_iterates: bool = field(default=False, metadata=doc(
        EVALUATION, "evaluate the running average of the global models after each server "
        "step, (w_1 + ... + w_t) / t, instead of the last one (AFL's output, as its authors "
        "evaluate it)"))
    train_loss: bool = field(default=False, metadata=doc(
        EVALUATION, "report every round's train_loss (the received model's mean loss on the "
        "cohort's training rows) even where the rule does not weigh by losses: one more "
        "inference pass over the cohort a round for models other than the logreg kernel's"))
    precision: str = field(default="fp32", metadata=doc(
        EXECUTION, "the arithmetic of the cohort's forward and backward passes: fp32, or bf16 / "
        "fp16 autocast (parameters, updates, aggregation and rule state stay fp32/fp64); "
        "refused where the device cannot run it", choices=PRECISIONS))
    device: str = field(default="cpu", metadata=doc(
        EXECUTION, "cpu, cuda or cuda:N: where the model, the cohort's data and training live "
        "(under torchrun with cuda, each process uses GPU LOCAL_RANK)"))

    def __post_init__(self) -> None:
        # The checks that build part of a rule load here, not with the module: the command
        # line's parser reads the fields above and starts without the rules.
        from fastfair.aggregators.bounds import check_bound
        from fastfair.aggregators.compose import check_objective_options

        for f in dataclasses.fields(self):   # NumPy scalars stored as the numbers they hold
            setattr(self, f.name, plain(getattr(self, f.name)))
        values = dataclasses.asdict(self)
        spec = dataclass_options(type(self))
        check_options("SimulationConfig", values, spec)
        check_name("rule (--rule)", self.rule, [*RULE_NAMES, *METHODS])
        for name, value in values.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{_named(name)} must be finite; got {value}")
        for name in ("clients", "per_round", "rounds", "eval_every", "eval_clients", "batch_size",
                     "epochs", "max_samples", "hidden", "classes_per_client", "groups"):
            if getattr(self, name) < 1:
                raise ValueError(f"{_named(name)} must be >= 1; got {getattr(self, name)}")
        if self.local_steps is not None and self.local_steps < 1:
            raise ValueError(f"{_named('local_steps')} must be >= 1 or None; got "
                             f"{self.local_steps}")
        if not DEVICE.fullmatch(self.device):
            raise ValueError(f"device (--device) must be 'cpu', 'cuda' or 'cuda:N'; got "
                             f"{self.device!r}")
        if not 0 <= self.validation <= 0.5:
            raise ValueError(f"{_named('validation')} must be in [0, 0.5]; got "
                             f"{self.validation}")
        if not 0 <= self.seed < 2 ** 63:  # seeds feed int64 generators (torch, the kernels)
            raise ValueError(f"seed (--seed) must be in [0, 2**63); got {self.seed}")
        if self.per_round > self.clients:
            raise ValueError(f"per_round ({self.per_round}, --per-round) cannot exceed clients "
                             f"({self.clients}, --clients)")
        partitions = PARTITIONS + ((self.partition,) if self.dataset == "adult"
                                   and str(self.partition).startswith("column:") else ())
        for name, choices in (("dataset", DATASETS), ("model", MODELS + (None,)),
                              ("partition", partitions), ("precision", PRECISIONS),
                              ("adult_features", ADULT_FEATURES)):
            if getattr(self, name) not in choices:
                raise ValueError(f"{_named(name)} must be one of "
                                 f"{', '.join(map(str, choices))}; got {getattr(self, name)!r}")
        for name, ok, what in (
                ("lr", self.lr > 0, "> 0"),
                ("server_lr", self.server_lr is None or self.server_lr > 0, "> 0"),
                ("lr_decay", 0 < self.lr_decay <= 1, "in (0, 1]"),
                ("synthetic_alpha", self.synthetic_alpha >= 0, ">= 0"),
                ("synthetic_beta", self.synthetic_beta >= 0, ">= 0"),
                ("dirichlet_alpha", self.dirichlet_alpha > 0, "> 0"),
                ("group_power", self.group_power >= 0, ">= 0"),
                ("group_shift", self.group_shift >= 0, ">= 0")):
            if not ok:
                raise ValueError(f"{_named(name)} must be {what}; got {getattr(self, name)}")
        for name in ("rule_options", "objective_options", "server_options",
                     "availability_options", "population_options"):
            options = getattr(self, name)
            if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
                flag = "--" + name[:-1].replace("_", "-")  # rule_options: --rule-option
                raise TypeError(f"{name} ({flag}) must be a dict of option names to values; got "
                                f"{options!r}")

        check_bound(self.max_update_norm, self.update_norm_reference,
                    self.max_samples_per_client, names={name: _named(name) for name in (
                        "max_update_norm", "update_norm_reference", "max_samples_per_client")})
        if self.max_update_norm is None and self.update_norm_reference != "median":
            raise ValueError(f"update_norm_reference = {self.update_norm_reference!r} has no "
                             "effect without max_update_norm (--max-update-norm): set that, or "
                             "leave update_norm_reference at its default")
        check_objective_options(self.objective, self.objective_options)
        if self.lr_schedule is not None:
            if self.lr_decay != 1.0:
                raise ValueError("lr_decay (--lr-decay) and lr_schedule (--lr-schedule) both "
                                 "schedule the client lr: give one (lr_decay d is "
                                 f"step:gamma={self.lr_decay:g},every=1)")
            parse_lr_schedule(self.lr_schedule, self.lr, self.rounds)
        self._check_used()
        self._check_groups()
        if self.population is not None:
            from fastfair.sim.population.selection import Policy

            Policy(self.policy, self.over_select, self.deadline)
        names.check_pair(self.dataset, self.model)
        family = names.get_dataset(self.dataset).family
        # With download, a data_dir not there yet is made when the files are fetched.
        if family != "generated" and not (self.data_dir and (os.path.isdir(self.data_dir) or (
                self.download and not os.path.lexists(self.data_dir)))):
            raise ValueError(f"dataset {self.dataset!r} is read from files: data_dir "
                             f"(--data-dir) must be an existing folder; got {self.data_dir!r} "
                             "(docs/data.md says where to get each data set)")

    def _check_used(self) -> None:
        """Refuses a non-default value of a field the other fields make unused."""
        changed = self.non_default_fields()
        family = names.get_dataset(self.dataset).family
        split = self.dataset == "digits" or family in ("vision", "images", "table")
        unused = {
            "synthetic_alpha": self.dataset != "synthetic", "synthetic_beta":
            self.dataset != "synthetic",
            "max_samples": self.dataset not in ("synthetic", "grouped"),
            "groups": self.dataset != "grouped", "group_power": self.dataset != "grouped",
            "group_shift": self.dataset != "grouped",
            "data_dir": family == "generated", "download": family != "vision",
            "partition": not split,
            "dirichlet_alpha": not split or self.partition != "dirichlet",
            "classes_per_client": not split or self.partition != "pathological",
            "hidden": (self.model or names.get_dataset(self.dataset).default_model) != "mlp",
            "group_prior": self.fair_over != "groups", "group_share": self.fair_over != "groups",
            "group_by_class": not split,
            "adult_features": self.dataset != "adult",
            "epochs": self.local_steps is not None,
            "policy": self.population is None, "over_select": self.population is None,
            "deadline": self.population is None}
        for name, is_unused in unused.items():
            if is_unused and name in changed:
                raise ValueError(f"{name} = {changed[name]!r} has no effect in this configuration "
                                 f"(dataset={self.dataset!r}, partition={self.partition!r}, "
                                 f"model={self.model!r}, local_steps={self.local_steps!r}); "
                                 "leave it at its default")

    def _check_groups(self) -> None:
        """Refuses groups given twice and a groups file that is not there (data without groups
        are refused once they are read: a run may be given a data set of its own)."""
        if self.groups_file is not None and self.group_by_class:
            raise ValueError("groups_file (--groups-file) and group_by_class (--group-by-class) "
                             "both give the clients' groups: choose one")
        if self.groups_file is not None and not os.path.isfile(self.groups_file):
            raise ValueError(f"groups_file (--groups-file) {self.groups_file!r} is not a file")

    def client_lr(self, t: int) -> float:
        """The client learning rate of round ``t`` (1-based): ``lr`` under ``lr_schedule``, or
        under the per-round factor ``lr_decay`` (:func:`fastfair.sim.lr_schedule.round_lr`)."""
        schedule = None if self.lr_schedule is None else parse_lr_schedule(
            self.lr_schedule, self.lr, self.rounds)
        return round_lr(self.lr, t, self.lr_decay, schedule)

    def to_dict(self) -> Dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: Dict[str, Any]) -> "SimulationConfig":
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown configuration keys: {', '.join(unknown)}")
        return cls(**d)

    def with_clients_of(self, dataset: Optional[FederatedDataset]) -> "SimulationConfig":
        """This configuration for a run on ``dataset``, a data set given in place of
        ``self.dataset`` (e.g. an :class:`~fastfair.sim.data.arrays.ArrayDataset`): ``clients``
        left at its default becomes the data set's ``num_clients``; one set otherwise stays
        (a runner refuses it when it differs). ``dataset`` None: this configuration.

        Raises
        ------
        ValueError
            The data set has fewer clients than ``per_round``.
        """
        if dataset is None or "clients" in self.non_default_fields() \
                or self.clients == dataset.num_clients:
            return self
        k = int(dataset.num_clients)
        if self.per_round > k:
            raise ValueError(f"the data set given has {k} clients, fewer than per_round "
                             f"({self.per_round}): set per_round (--per-round) to at most {k}")
        return dataclasses.replace(self, clients=k)

    def non_default_fields(self) -> Dict[str, Any]:
        """The fields whose values differ from the defaults."""
        out = {}
        for f in dataclasses.fields(self):
            default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
            if getattr(self, f.name) != default:
                out[f.name] = getattr(self, f.name)
        return out
