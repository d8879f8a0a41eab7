"""The settings idiom every layer of the simulator shares: a dataclass of fields documented in
their metadata (:func:`doc`), torch-free, that checks itself when made (:class:`Settings`).

Each layer defines its settings beside its code: the rule's in
:mod:`fastfair.sim.rounds.settings`, the data's in :mod:`fastfair.sim.data.settings`, local
training's and evaluation's in :mod:`fastfair.sim.training.settings`, the population's in
:mod:`fastfair.sim.population.settings`. :class:`~fastfair.sim.config.SimulationConfig`
composes them; its flat field names are the serialised, command-line and config-file form.

.. code-block:: python

    @dataclass
    class MySettings(Settings):
        width: int = field(default=8, metadata=doc(TRAINING, "the width"))

        def _check(self) -> None:
            at_least_one(self, "width")

Adding a setting is one field (with its help) in its layer's class and, when it has a rule of
its own, one line in that class's ``_check``: the command line, configuration files and saved
runs take it from there.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Dict, List

from fastfair._options import check_options, dataclass_options, plain

#: The sections fields are listed under (``fastfair simulate --help`` shows one per section).
RULES, DATA, TRAINING = "rules", "population and data", "model and training"
EVALUATION, EXECUTION = "evaluation and output", "execution"

#: The order of the fields saved runs list (``sweep.json``, ``config.json``) and ``--help``
#: shows, as it was when every field lived in one class (with the two settings added beside
#: them then). A field added since follows them, in its layer's order: adding a setting needs
#: no line here.
SAVED_ORDER = (
    "rule", "rule_options", "objective", "objective_options", "dataset", "clients", "per_round",
    "rounds", "seed", "fair_over", "group_prior", "group_share", "synthetic_alpha",
    "synthetic_beta", "max_samples", "groups", "group_power", "group_shift", "data_dir",
    "groups_file", "group_by_class", "download", "partition", "dirichlet_alpha",
    "classes_per_client", "adult_features", "model", "hidden", "epochs", "local_steps",
    "batch_size", "lr", "lr_decay", "lr_schedule", "server_lr", "server_optimizer",
    "server_options", "max_update_norm", "update_norm_reference", "max_samples_per_client",
    "availability", "availability_options", "population", "population_options", "policy",
    "over_select", "deadline", "eval_every", "eval_clients", "class_metrics", "validation",
    "eval_average_iterates", "train_loss", "precision", "device")


def doc(group: str, help: str, **more: Any) -> Dict[str, Any]:
    """A field's documentation, as its ``metadata``: ``help`` (its line in ``--help``),
    ``group`` (the section it is listed under) and, in ``more``, ``choices`` (a tuple of the
    names, from the plain name tables the layers above check theirs against) and ``metavar``
    (the value's name in ``--help``). The command line makes one option of each field from
    these (:mod:`fastfair.cli_options`)."""
    return {"help": help, "group": group, **more}


def named(field_name: str) -> str:
    """A field as its errors name it: the field and its command-line option,
    ``"per_round (--per-round)"``."""
    return f"{field_name} (--{field_name.replace('_', '-')})"


def ordered_fields(cls: type) -> List[dataclasses.Field]:
    """The fields of the settings class ``cls`` in their saved order (:data:`SAVED_ORDER`,
    then the others in the class's order)."""
    rank = {name: i for i, name in enumerate(SAVED_ORDER)}
    fields = dataclasses.fields(cls)
    return sorted(fields, key=lambda f: rank.get(f.name, len(rank)))


def at_least_one(settings: Any, *names: str) -> None:
    """Raises ValueError naming the first field of ``names`` below 1."""
    for name in names:
        if getattr(settings, name) < 1:
            raise ValueError(f"{named(name)} must be >= 1; got {getattr(settings, name)}")


def check_ranges(settings: Any, *checks: Any) -> None:
    """Raises ValueError for the first ``(name, ok, what)`` of ``checks`` that is not ok:
    ``"lr (--lr) must be > 0; got 0"``."""
    for name, ok, what in checks:
        if not ok:
            raise ValueError(f"{named(name)} must be {what}; got {getattr(settings, name)}")


def check_option_tables(settings: Any, *names: str) -> None:
    """Raises TypeError unless each field of ``names`` is a dict of option names to values."""
    for name in names:
        options = getattr(settings, name)
        if not isinstance(options, dict) or not all(isinstance(k, str) for k in options):
            flag = "--" + name[:-1].replace("_", "-")  # rule_options: --rule-option
            raise TypeError(f"{name} ({flag}) must be a dict of option names to values; got "
                            f"{options!r}")


def refuse_unused(settings: Any, unused: Dict[str, bool], context: str) -> None:
    """Raises ValueError for the first field of ``unused`` that is unused (True) but set to
    other than its default; ``context`` says which settings make it unused."""
    changed = non_default_fields(settings)
    for name, is_unused in unused.items():
        if is_unused and name in changed:
            raise ValueError(f"{name} = {changed[name]!r} has no effect in this configuration "
                             f"({context}); leave it at its default")


def non_default_fields(settings: Any) -> Dict[str, Any]:
    """The fields of the settings dataclass ``settings`` whose values differ from the
    defaults."""
    out = {}
    for f in dataclasses.fields(settings):
        default = f.default if f.default_factory is dataclasses.MISSING else f.default_factory()
        if getattr(settings, f.name) != default:
            out[f.name] = getattr(settings, f.name)
    return out


class Settings:
    """The base of a layer's settings dataclass: made, it stores NumPy scalars as the numbers
    they hold, checks every field's type (a ``TypeError`` naming it), that floats are finite,
    then runs the ``_check`` of each settings class it is made of (``ValueError`` naming the
    field), in the order of its fields. A composition of layers
    (:class:`~fastfair.sim.config.SimulationConfig`) checks each layer once, then its own
    ``_check`` across them."""

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            setattr(self, f.name, plain(getattr(self, f.name)))  # NumPy scalars as numbers
        values = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}  # type: ignore[arg-type]
        check_options(type(self).__name__, values, dataclass_options(type(self)))
        for name, value in values.items():
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{named(name)} must be finite; got {value}")
        for layer in reversed(type(self).__mro__):
            check = vars(layer).get("_check")
            if check is not None:
                check(self)

    def non_default_fields(self) -> Dict[str, Any]:
        """The fields whose values differ from the defaults."""
        return non_default_fields(self)
