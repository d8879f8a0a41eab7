"""The data's settings (:class:`DataSettings`): which data set, where its files are, how it is
split across clients and how its clients are grouped, and the options of each data set. Which
of these a data set reads is declared in its registry entry
(:attr:`~fastfair.sim.registry.DatasetSpec.options`), and which a partition scheme reads in
:data:`~fastfair.sim.data.partitions.PARTITIONS`; a non-default value of one the run does not
read is refused. Torch-free."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Optional, Tuple

from fastfair.sim import names
from fastfair.sim.data.partitions import PARTITIONS
from fastfair.sim.settings import (
    DATA,
    Settings,
    at_least_one,
    check_ranges,
    doc,
    named,
    refuse_unused,
)

#: The values of ``adult_features``: the encodings of UCI Adult (module docstring of
#: :mod:`fastfair.sim.data.adult`).
ADULT_FEATURES = ("all", "categorical")


def _families(family: str) -> str:
    return ", ".join(n for n in names.list_datasets() if names.get_dataset(n).family == family)


@dataclass
class DataSettings(Settings):
    """The data set (``dataset``, a name of :func:`fastfair.sim.names.list_datasets`) and its
    options. Data sets read from files take ``data_dir`` (vision ones may ``download``
    missing files); ``groups_file`` or ``group_by_class`` give the clients' groups."""

    dataset: str = field(default="synthetic", metadata=doc(
        DATA, "the data set; all but the generated ones (" + _families("generated") + ") are "
        "read from --data-dir (see docs/data.md)", choices=tuple(names.list_datasets())))
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
        DATA, _families("vision") + ": fetch missing files into --data-dir with torchvision's "
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

    def _check(self) -> None:
        at_least_one(self, "max_samples", "classes_per_client", "groups")
        spec = names.get_dataset(self.dataset)
        schemes = [*PARTITIONS, *([self.partition] if spec.column_partitions
                                  and str(self.partition).startswith("column:") else [])]
        if self.partition not in schemes:
            raise ValueError(f"{named('partition')} must be one of {', '.join(schemes)}; got "
                             f"{self.partition!r}")
        if self.adult_features not in ADULT_FEATURES:
            raise ValueError(f"{named('adult_features')} must be one of "
                             f"{', '.join(ADULT_FEATURES)}; got {self.adult_features!r}")
        check_ranges(self, ("synthetic_alpha", self.synthetic_alpha >= 0, ">= 0"),
                     ("synthetic_beta", self.synthetic_beta >= 0, ">= 0"),
                     ("dirichlet_alpha", self.dirichlet_alpha > 0, "> 0"),
                     ("group_power", self.group_power >= 0, ">= 0"),
                     ("group_shift", self.group_shift >= 0, ">= 0"))
        self._check_used(spec.options)
        if self.groups_file is not None and self.group_by_class:
            raise ValueError("groups_file (--groups-file) and group_by_class (--group-by-class) "
                             "both give the clients' groups: choose one")
        if self.groups_file is not None and not os.path.isfile(self.groups_file):
            raise ValueError(f"groups_file (--groups-file) {self.groups_file!r} is not a file")
        # With download, a data_dir not there yet is made when the files are fetched.
        if "data_dir" in spec.options and not (self.data_dir and (
                os.path.isdir(self.data_dir) or (
                    self.download and not os.path.lexists(self.data_dir)))):
            raise ValueError(f"dataset {self.dataset!r} is read from files: data_dir "
                             f"(--data-dir) must be an existing folder; got {self.data_dir!r} "
                             "(docs/data.md says where to get each data set)")

    def _check_used(self, reads: Tuple[str, ...]) -> None:
        """Refuses a non-default value of an option of another data set or partition scheme
        than this run's (the data set reads ``reads``)."""
        if "partition" in reads:
            reads = reads + PARTITIONS.get(self.partition, ())
        declared = {o for n in names.list_datasets() for o in names.get_dataset(n).options}
        declared |= {o for options in PARTITIONS.values() for o in options}
        refuse_unused(self, {f.name: f.name not in reads for f in dataclasses.fields(DataSettings)
                             if f.name in declared},
                      f"dataset={self.dataset!r}, partition={self.partition!r}")
