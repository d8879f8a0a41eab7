"""The real data sets of ``../shared/data`` (beside the repository root), for the tests that read
them: a test asks :func:`shared_data` for a folder and is skipped, saying why, where it is
absent."""

from __future__ import annotations

import tarfile
from pathlib import Path
from typing import Callable, Optional

import pytest

REPO = Path(__file__).resolve().parents[2]
SHARED_DATA = REPO.parent / "shared" / "data"


def shared_data(name: str) -> Path:
    """``../shared/data/<name>``, or the test is skipped saying that folder is absent."""
    path = SHARED_DATA / name
    if not path.is_dir():
        pytest.skip(f"{path} is absent: the real data sets are read from ../shared/data beside "
                    "the repository root, where it is there")
    return path


def extract(archive: Path, into: Path,
            wanted: Optional[Callable[[str], bool]] = None,
            stop: Optional[Callable[[str], bool]] = None) -> Path:
    """Extracts the regular files of the ``.tar.gz`` ``archive`` whose names ``wanted`` accepts
    (all when None) into ``into``, reading the archive as a stream and stopping at the first
    member ``stop`` accepts; returns ``into``."""
    with tarfile.open(archive, "r|gz") as tar:
        for member in tar:
            if stop is not None and stop(member.name):
                break
            if member.isfile() and (wanted is None or wanted(member.name)):
                tar.extract(member, into, filter="data")
    return into
