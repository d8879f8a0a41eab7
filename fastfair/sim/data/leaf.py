"""LEAF's federated data sets, read from the JSON files LEAF's ``preprocess.sh`` writes
(``DIR/train/*.json`` and ``DIR/test/*.json``, split by sample with ``-t sample``): one client per
user, each with its own train and test samples.

=============  ==============================================================================
femnist        x: 784 pixels in [0, 1] per sample -> ``[1, 28, 28]`` float32; y: 62 classes
shakespeare    x: 80-character strings, y: the next character -> ids ``[80]`` of LEAF's 80
               letters (81st id: any other character); labels per position ``[80]``: the
               string shifted by one and the next character (next-character prediction)
sent140        x: ``[id, date, query, user, text]``, y: 0/1 -> the text's first 25 words
               (LEAF's split, lower-cased) hashed to ids in [1, 16384), left-padded with 0
celeba         x: image file names in ``DIR/raw/img_align_celeba`` (or
               ``DIR/img_align_celeba``), y: smiling 0/1 -> ``[3, 84, 84]`` float32 (resized
               as LEAF does; needs Pillow)
=============  ==============================================================================

Opening reads the top of every file only (users and sample counts); a client's entry is read
and decoded when the client is sampled (:mod:`fastfair.sim.data.leaf_json`).

``DIR`` holds ``train/*.json`` and ``test/*.json`` as ``preprocess.sh`` writes them, or the
files themselves side by side, named ``*train*.json`` and ``*test*.json``. Two things LEAF's own
output does are accepted and reported once, on the ``fastfair.sim.data`` logger (the command
line prints it):

- partial sets, whose train and test files do not hold the same users (a subset of LEAF's
  shards): the users of the test files without training data are left out (the clients are the
  users with training data), and users with training data but no test entry are evaluated on
  nothing; the message counts both, users and samples;
- Shakespeare's test ``num_samples``: LEAF's ``split_data.py`` drops the 79 windows of a role's
  test part that overlap its training part (80-character windows, so ``SEQUENCE - 1`` of them)
  but still counts them, so each test entry holds ``num_samples - 79`` records (none when
  ``num_samples <= 79``). Those records are used. Any other count that differs from the
  records is refused.
"""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import re
import zlib
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from fastfair._files import loads_json, open_regular
from fastfair.sim.data.base import check_finite
from fastfair.sim.data.client_files import ClientFiles, choose_clients
from fastfair.sim.data.leaf_json import LeafFile, parse_unit_pixels

LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"
SEQUENCE = 80
WORDS = 25
VOCAB = 1 << 14
IMAGE = 84
#: Windows of a Shakespeare role's test part that LEAF's split counts but does not write.
OVERLAP = SEQUENCE - 1
LOGGER = logging.getLogger("fastfair.sim.data")
_WORD = re.compile(r"[\w']+|[.,!?;]")

#: name -> (sample shape, classes, kind, vocabulary, label shape)
SHAPES = {
    "femnist": ((1, 28, 28), 62, "image", None, ()),
    "shakespeare": ((SEQUENCE,), len(LETTERS) + 1, "tokens", len(LETTERS) + 1, (SEQUENCE,)),
    "sent140": ((WORDS,), 2, "tokens", VOCAB, ()),
    "celeba": ((3, IMAGE, IMAGE), 2, "image", None, ()),
}


def split_files(data_dir: str, split: str) -> List[str]:
    """The JSON files of ``split`` ('train' or 'test'), in name order: ``data_dir/split/*.json``
    (LEAF's layout), else the ``*split*.json`` files of ``data_dir`` itself (ValueError naming
    both places when neither holds any)."""
    folder = os.path.join(data_dir, split)
    if os.path.isdir(folder):
        paths = sorted(glob.glob(os.path.join(folder, "*.json")))
    else:
        paths = sorted(glob.glob(os.path.join(data_dir, f"*{split}*.json")))
    if not paths:
        raise ValueError(f"no {split} files: {folder}/*.json (LEAF's layout, preprocess.sh -t "
                         f"sample) or {data_dir}/*{split}*.json; point --data-dir at the folder "
                         "that holds them")
    return paths


class LeafSplit:
    """The users of one split's files (``paths``, in that order): where each user's entry
    is."""

    def __init__(self, paths: List[str]) -> None:
        self.files = [LeafFile(p) for p in paths]
        self.where: Dict[str, Tuple[int, int]] = {}
        for f, leaf in enumerate(self.files):
            for i, user in enumerate(leaf.users):
                if user in self.where:
                    raise ValueError(f"user {user!r} appears in {leaf.path} and "
                                     f"{self.files[self.where[user][0]].path}")
                self.where[user] = (f, i)

    def users(self) -> List[str]:
        return [u for leaf in self.files for u in leaf.users]

    def count(self, user: str) -> int:
        if user not in self.where:
            return 0
        f, i = self.where[user]
        return int(self.files[f].num_samples[i])


def count_users(data_dir: str) -> int:
    """The number of users with training data in ``data_dir`` (reads the train files' headers
    only)."""
    return len(LeafSplit(split_files(data_dir, "train")).where)


def clients_digest(users: Sequence[str], train: Iterable[int], test: Iterable[int]) -> str:
    """A short fingerprint of a LEAF subset's clients: the first 16 hex digits of the SHA-256
    of one line ``"<user>\t<training samples>\t<test samples>\n"`` per client, users in
    sorted order (so the files' names and order do not matter, the users and their counts
    do). Two subsets with the same digest hold the same users with the same sample counts."""
    train, test = [int(n) for n in train], [int(n) for n in test]
    if not len(users) == len(train) == len(test):
        raise ValueError(f"users, train and test must have one entry per client; got "
                         f"{len(users)}, {len(train)} and {len(test)}")
    lines = sorted(f"{u}\t{n}\t{m}\n" for u, n, m in zip(users, train, test))
    return hashlib.sha256("".join(lines).encode()).hexdigest()[:16]


class LeafDataset(ClientFiles):
    """LEAF data set ``name`` in ``data_dir``; ``clients`` users (all when None, else a seeded
    random subset, in file order) are the clients."""

    def __init__(self, name: str, data_dir: str, clients: Optional[int] = None, *, seed: int = 0,
                 cache_bytes: int = 1 << 30) -> None:
        if name not in SHAPES:
            raise ValueError(f"unknown LEAF data set {name!r}; choose from {', '.join(SHAPES)}")
        self.name, self.data_dir = name, data_dir
        self.splits = {s: LeafSplit(split_files(data_dir, s)) for s in ("train", "test")}
        self._report_partial()
        self._overlap_noted = False
        self.users = users = choose_clients(self.splits["train"].users(), clients, seed,
                                            f"users of {data_dir}")
        if name == "celeba":
            self.images = _image_folder(data_dir)
        shape, classes, kind, vocab, labels = SHAPES[name]
        counts = {s: np.array([self.splits[s].count(u) for u in users], dtype=np.int64)
                  for s in self.splits}
        super().__init__(counts, shape, classes, kind=kind, vocab_size=vocab, label_shape=labels,
                         cache_bytes=cache_bytes)
        self.digest = clients_digest(users, counts["train"], counts["test"])
        LOGGER.info("%s in %s: %d clients, %d training and %d test samples; clients digest %s "
                    "(docs/data.md lists the digests of the subsets the tables use)", name,
                    data_dir, len(users), int(counts["train"].sum()), int(counts["test"].sum()),
                    self.digest)

    def _report_partial(self) -> None:
        """Logs, once, the users one split holds and the other does not (a partial set)."""
        train, test = self.splits["train"], self.splits["test"]
        only_test = [u for u in test.where if u not in train.where]
        only_train = [u for u in train.where if u not in test.where]
        if only_test:
            LOGGER.warning("%s in %s: %d users of the test files (%d test samples) have no "
                           "training data and are left out; the %d users with training data "
                           "are the clients", self.name, self.data_dir, len(only_test),
                           sum(test.count(u) for u in only_test), len(train.where))
        if only_train:
            LOGGER.warning("%s in %s: %d users (%d training samples) have no test entry and are "
                           "evaluated on nothing", self.name, self.data_dir, len(only_train),
                           sum(train.count(u) for u in only_train))

    def describe(self, k: int, split: str = "train") -> str:
        """``user 'name' in FILE`` (the file of its ``split`` data), or ``of DIR`` when the
        split has no entry of that user."""
        user = self.users[k]
        where = self.splits[split].where.get(user)
        if where is None:
            return f"user {user!r} of {self.data_dir}"
        return f"user {user!r} in {self.splits[split].files[where[0]].path}"

    def _read(self, split: str, k: int) -> Tuple[np.ndarray, np.ndarray]:
        user = self.users[k]
        if user not in self.splits[split].where:
            return (np.empty((0,) + self.sample_shape, np.uint8),
                    np.empty((0,) + self.label_shape, np.int64))
        f, i = self.splits[split].where[user]
        leaf = self.splits[split].files[f]
        who = f"{self.describe(k, split)} (client {k})"
        if self.name == "femnist":
            x_text, y_text = leaf.numeric_entry(i)
            try:
                x = parse_unit_pixels(x_text, 784).reshape(-1, 1, 28, 28)
            except ValueError as exc:
                raise ValueError(f"{who}: {exc}") from None
            check_finite(x, who, "x")
            return x, self._labels(loads_json(y_text, f"{who}: y"), k, who)
        entry = leaf.json_entry(i)
        try:
            if self.name == "shakespeare":
                ids = _char_ids(entry["x"], SEQUENCE, who)
                nxt = _char_ids(entry["y"], 1, who)
                if split == "test":
                    self._accept_overlap(k, len(ids))
                return ids, np.concatenate([ids[:, 1:], nxt], axis=1)
            if self.name == "sent140":
                return _word_ids([row[4] for row in entry["x"]]), self._labels(entry["y"], k, who)
            return self._images(entry["x"], who), self._labels(entry["y"], k, who)
        except (TypeError, KeyError, IndexError, AttributeError) as exc:
            raise ValueError(f"{who}: its entry is not what LEAF writes for {self.name} "
                             f"({type(exc).__name__}: {exc})") from None

    def _accept_overlap(self, k: int, held: int) -> None:
        """Takes the ``held`` records of user ``k``'s Shakespeare test entry as its count where
        ``num_samples`` counts the :data:`OVERLAP` windows LEAF's split drops (logged once per
        data set); other differences are left for :class:`ClientFiles` to refuse."""
        counted = int(self._counts["test"][k])
        if held == counted or held != max(0, counted - OVERLAP):
            return
        self._counts["test"][k] = held
        if not self._overlap_noted:
            self._overlap_noted = True
            LOGGER.warning("shakespeare in %s: the test entries hold %d windows fewer than their "
                           "num_samples count (%s: %d of %d), as LEAF's split_data.py writes "
                           "them: it drops the windows that overlap a role's training part but "
                           "counts them; the records held are used", self.data_dir, OVERLAP,
                           self.describe(k, "test"), held, counted)

    def _labels(self, values, k: int, who: str) -> np.ndarray:
        try:
            y = np.asarray(values, dtype=np.float64).reshape(-1)
        except (TypeError, ValueError, OverflowError):
            y = np.full(1, np.nan)
        if y.size and ((y != np.round(y)).any() or y.min() < 0 or y.max() >= self.num_classes):
            raise ValueError(f"{who}: labels must be integers in [0, {self.num_classes})")
        return y.astype(np.int64)

    def _images(self, names: List[str], who: str) -> np.ndarray:
        """The images ``names`` (plain file names in the image folder; regular files only)
        as ``[n, 3, IMAGE, IMAGE]`` uint8; one that cannot be read is a ValueError naming it."""
        try:
            from PIL import Image
        except ModuleNotFoundError as exc:
            raise ModuleNotFoundError(f"{who}: reading an image folder needs Pillow: pip install "
                                      "\"fastfair[data]\" (or pip install Pillow)",
                                      name=exc.name) from exc

        out = np.empty((len(names), 3, IMAGE, IMAGE), dtype=np.uint8)
        for j, name in enumerate(names):
            if not isinstance(name, str) or os.path.basename(name) != name or name in ("", ".",
                                                                                      ".."):
                raise ValueError(f"{who}: image {name!r} is not a file name in {self.images}")
            path = os.path.join(self.images, name)
            try:
                f = open_regular(path)
            except ValueError as exc:
                raise ValueError(f"{who}: {exc}") from None
            try:
                with f, Image.open(f) as img:
                    out[j] = np.asarray(img.resize((IMAGE, IMAGE)).convert("RGB")).transpose(
                        2, 0, 1)
            except (OSError, SyntaxError, Image.DecompressionBombError) as exc:
                raise ValueError(f"{who}: {path} is not a readable image "
                                 f"({type(exc).__name__}: {exc})") from None
        return out


def _image_folder(data_dir: str) -> str:
    for folder in (os.path.join(data_dir, "raw", "img_align_celeba"),
                   os.path.join(data_dir, "img_align_celeba")):
        if os.path.isdir(folder):
            try:
                import PIL  # noqa: F401
            except ImportError:
                raise ValueError("celeba reads JPEG images: install Pillow "
                                 "(pip install pillow)") from None
            return folder
    raise ValueError(f"celeba needs the images: {data_dir}/raw/img_align_celeba (LEAF's layout) "
                     f"or {data_dir}/img_align_celeba")


def _char_ids(strings: List[str], length: int, who: str) -> np.ndarray:
    """``[n, length]`` ids of ``strings`` in :data:`LETTERS` (other characters: the last id)."""
    if any(len(s) != length for s in strings):
        raise ValueError(f"{who}: every string must hold {length} characters")
    codes = np.frombuffer("".join(strings).encode("utf-32-le"), dtype=np.uint32)
    letters = np.frombuffer(LETTERS.encode("utf-32-le"), dtype=np.uint32)
    order = np.argsort(letters)
    pos = np.minimum(np.searchsorted(letters[order], codes), len(letters) - 1)
    known = letters[order][pos] == codes
    return np.where(known, order[pos], len(letters)).astype(np.int64).reshape(-1, length)


def _word_ids(texts: List[str]) -> np.ndarray:
    """``[n, WORDS]`` ids: each text's first :data:`WORDS` words (LEAF's split, lower-cased)
    hashed by CRC-32 into [1, VOCAB), left-padded with 0."""
    out = np.zeros((len(texts), WORDS), dtype=np.int64)
    for j, text in enumerate(texts):
        words = _WORD.findall(text.lower())[:WORDS]
        if words:
            out[j, WORDS - len(words):] = [zlib.crc32(w.encode()) % (VOCAB - 1) + 1
                                           for w in words]
    return out
