"""The partition schemes of ``--partition`` by name, with the settings of
:class:`~fastfair.sim.data.settings.DataSettings` each reads
(:func:`fastfair.sim.data.arrays.partition_labels` splits by them). Plain data."""

from typing import Dict, Tuple

#: Each scheme and the settings it reads.
PARTITIONS: Dict[str, Tuple[str, ...]] = {
    "iid": (), "dirichlet": ("dirichlet_alpha",), "pathological": ("classes_per_client",)}
