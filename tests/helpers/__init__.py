"""What several test folders share: array factories (:mod:`.arrays`), the tolerance table
(:mod:`.tolerances`), fake DLPack producers (:mod:`.dlpack_fakes`), small data files in the real
formats (:mod:`.sim_files`) and comparisons of run folders (:mod:`.runs`)."""

from pathlib import Path

#: The repository's root folder.
ROOT = Path(__file__).resolve().parents[2]
