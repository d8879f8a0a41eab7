"""Tiny data sets written in the exact on-disk formats the simulator reads: LEAF JSON (as LEAF's
``json.dump`` writes it), IDX files, CIFAR python pickles, per-client ``.npz`` files."""

from __future__ import annotations

import errno
import gzip
import io
import json
import pickle
import struct
import zipfile
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

import numpy as np

LETTERS = "\n !\"&'(),-.0123456789:;>?ABCDEFGHIJKLMNOPQRSTUVWXYZ[]abcdefghijklmnopqrstuvwxyz}"


def write_leaf(root: Path, data: Dict[str, Dict[str, dict]], per_file: int = 3,
               removed: bool = True, ensure_ascii: bool = True) -> None:
    """``data[split][user] = {"x": [...], "y": [...]}`` as LEAF's ``preprocess.sh -t sample``
    writes it: ``root/<split>/all_data_<i>_niid_0_keep_0_<split>_9.json`` with ``per_file``
    users each; ``removed`` adds the empty entries LEAF keeps for users it dropped (present in
    user_data, absent from users) and a ``hierarchies`` key after user_data. ``ensure_ascii``:
    json.dump's default (non-ASCII text as ``\\u`` escapes), or UTF-8 text when False."""
    for split, users in data.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        names = list(users)
        for f, start in enumerate(range(0, len(names), per_file)):
            chunk = names[start:start + per_file]
            user_data = {}
            for u in chunk:
                user_data[u] = users[u]
                if removed:
                    user_data[u + "_dropped"] = {"x": [], "y": []}
            all_data = {"users": chunk, "num_samples": [len(users[u]["y"]) for u in chunk],
                        "user_data": user_data}
            if removed:
                all_data["hierarchies"] = ["h"] * len(chunk)
            with open(root / split / f"all_data_{f}_niid_0_keep_0_{split}_9.json", "w",
                      encoding="utf-8") as out:
                json.dump(all_data, out, ensure_ascii=ensure_ascii)


def split_users(rng: np.random.Generator, users: Dict[str, dict]) -> Dict[str, Dict[str, dict]]:
    """Each user's samples split 90/10 (at least one of each), as LEAF's by-sample split."""
    out: Dict[str, Dict[str, dict]] = {"train": {}, "test": {}}
    for u, d in users.items():
        n = len(d["y"])
        order = rng.permutation(n)
        cut = max(1, int(0.9 * n)) if n > 2 else 1
        for split, rows in (("train", order[:cut]), ("test", order[cut:])):
            out[split][u] = {"x": [d["x"][i] for i in rows], "y": [d["y"][i] for i in rows]}
    return out


def femnist_users(rng: np.random.Generator, sizes: List[int]) -> Dict[str, dict]:
    """Writers ``f0000_00``... with 28x28 images as LEAF stores them (``pixel / 255`` floats)."""
    users = {}
    for k, n in enumerate(sizes):
        pixels = np.where(rng.random((n, 784)) < 0.7, 255, rng.integers(0, 256, (n, 784)))
        users[f"f{k:04d}_{k % 100:02d}"] = {"x": (pixels / 255).tolist(),
                                            "y": rng.integers(0, 62, n).tolist()}
    return users


def shakespeare_users(rng: np.random.Generator, sizes: List[int]) -> Dict[str, dict]:
    """Roles with 80-character lines (one character outside LEAF's letters) and the next
    character."""
    alphabet = np.array(list(LETTERS + "~"))
    users = {}
    for k, n in enumerate(sizes):
        text = "".join(rng.choice(alphabet, n + 80))
        users[f"THE_PLAY_ROLE_{k}"] = {"x": [text[i:i + 80] for i in range(n)],
                                       "y": [text[i + 80] for i in range(n)]}
    return users


def sent140_users(rng: np.random.Generator, sizes: List[int]) -> Dict[str, dict]:
    """Twitter users with [id, date, query, user, text] rows and 0/1 sentiment."""
    words = ["good", "bad", "day", "Happy", "sad", "!", "so", "very", "can't", "?"]
    users = {}
    for k, n in enumerate(sizes):
        name = f"user{k}"
        rows = [[str(1000 + i), "Mon Apr 06 22:19:49 PDT 2009", "NO_QUERY", name,
                 " ".join(rng.choice(words, rng.integers(1, 40)))] for i in range(n)]
        users[name] = {"x": rows, "y": rng.integers(0, 2, n).tolist()}
    return users


def celeba_users(rng: np.random.Generator, sizes: List[int], images: Path) -> Dict[str, dict]:
    """Celebrities with JPEG files in ``images`` and smiling as LEAF writes it (1.0 / 0.0)."""
    from PIL import Image

    images.mkdir(parents=True, exist_ok=True)
    users, count = {}, 0
    for k, n in enumerate(sizes):
        names = []
        for _ in range(n):
            count += 1
            name = f"{count:06d}.jpg"
            Image.fromarray(rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)).save(images / name)
            names.append(name)
        users[str(100 + k)] = {"x": names, "y": [float(v) for v in rng.integers(0, 2, n)]}
    return users


def write_idx(path: Path, array: np.ndarray, compress: bool = False) -> None:
    """A uint8 array as an IDX file (``.gz`` when ``compress``)."""
    header = bytes([0, 0, 8, array.ndim]) + np.array(array.shape, dtype=">u4").tobytes()
    payload = header + np.ascontiguousarray(array, dtype=np.uint8).tobytes()
    if compress:
        with gzip.open(str(path) + ".gz", "wb") as f:
            f.write(payload)
    else:
        path.write_bytes(payload)


def write_mnist(root: Path, folder: str, rng: np.random.Generator, n_train: int = 600,
                n_test: int = 100, compress: bool = False) -> None:
    """torchvision's ``root/<folder>/raw`` IDX files with images whose mean encodes the class."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = rng.integers(0, 10, n).astype(np.uint8)
        images = (labels[:, None, None] * 25 + rng.integers(0, 20, (n, 28, 28))).astype(np.uint8)
        write_idx(raw / f"{prefix}-images-idx3-ubyte", images, compress)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte", labels, compress)


def write_cifar(root: Path, rng: np.random.Generator, classes: int = 10,
                n_batch: int = 100) -> None:
    """torchvision's CIFAR-10 (``cifar-10-batches-py``) or CIFAR-100 (``cifar-100-python``)
    python pickles (protocol 2, as the originals)."""
    def batch(n):
        labels = rng.integers(0, classes, n)
        data = labels[:, None] * (200 // classes) + rng.integers(0, 50, (n, 3072))
        data = data.astype(np.uint8)
        key = "labels" if classes == 10 else "fine_labels"
        out = {"batch_label": "batch", key: labels.tolist(), "data": data}
        if classes == 100:
            out["coarse_labels"] = (labels // 5).tolist()
        return out
    folder = root / ("cifar-10-batches-py" if classes == 10 else "cifar-100-python")
    folder.mkdir(parents=True)
    names = ([f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"] if classes == 10
             else ["train", "test"])
    for name in names:
        n = n_batch * (5 if name == "train" else 1)
        with open(folder / name, "wb") as f:
            pickle.dump(batch(n), f, protocol=2)


def write_npz_clients(root: Path, rng: np.random.Generator, sizes: List[int],
                      with_test: bool = True, shape=(6,)) -> None:
    """``root/client_<k>.npz`` with float x of ``shape`` and labels in [0, 3)."""
    root.mkdir(parents=True, exist_ok=True)
    for k, n in enumerate(sizes):
        arrays = {"x": rng.normal(size=(n,) + shape).astype(np.float32),
                  "y": rng.integers(0, 3, n)}
        if with_test:
            arrays["x_test"] = rng.normal(size=(3,) + shape).astype(np.float32)
            arrays["y_test"] = rng.integers(0, 3, 3)
        np.savez(root / f"client_{k:03d}.npz", **arrays)


def edit_cifar_batch(path: Path, edit: Callable[[dict], Any]) -> None:
    """Rewrites the CIFAR batch ``path`` after ``edit(batch)`` changed its dict in place."""
    with open(path, "rb") as f:
        batch = pickle.load(f, encoding="latin1")
    edit(batch)
    with open(path, "wb") as f:
        pickle.dump(batch, f, protocol=2)


def npy_bytes(header: Dict[str, Any], body: bytes) -> bytes:
    """A ``.npy`` file of format 1.0 with ``header`` (descr, fortran_order, shape) and ``body``,
    whatever the header declares."""
    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, header)
    return out.getvalue() + body


def patch_zip_sizes(path: Path, member: str, size: int) -> None:
    """Sets the uncompressed size that ``path``'s local and central headers declare for
    ``member`` (a zip without zip64 records) to ``size``."""
    raw = bytearray(path.read_bytes())
    name = member.encode()
    for signature, field in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = raw.find(signature)
        while at >= 0:
            name_at = at + (30 if field == 22 else 46)
            length = struct.unpack_from("<H", raw, at + (26 if field == 22 else 28))[0]
            if raw[name_at:name_at + length] == name:
                struct.pack_into("<I", raw, at + field, size)
            at = raw.find(signature, at + 4)
    path.write_bytes(bytes(raw))


def deep_checkpoint(depth: int) -> bytes:
    """A torch checkpoint file (zip) whose pickle is lists nested ``depth`` deep, built from
    opcodes (``torch.save`` of such a value overflows the C stack)."""
    import torch

    buf = io.BytesIO()
    torch.save({"history": [1]}, buf)
    pickled = b"\x80\x02" + b"]" * depth + b"a" * (depth - 1) + b"."   # EMPTY_LIST..., APPEND...
    out = io.BytesIO()
    with zipfile.ZipFile(io.BytesIO(buf.getvalue())) as zin, \
            zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as zout:
        for name in zin.namelist():
            zout.writestr(name, pickled if name.endswith("/data.pkl") else zin.read(name))
    return out.getvalue()


class _FullFile:
    """A file whose writes fail with ENOSPC once ``budget`` bytes (or characters) are written,
    the last write partly done, as on a disk that fills up."""

    def __init__(self, file: Any, budget: int) -> None:
        self._file, self._budget = file, budget

    def write(self, data):
        if len(data) > self._budget:
            self._file.write(data[:self._budget])
            self._budget = 0
            raise OSError(errno.ENOSPC, "No space left on device")
        self._budget -= len(data)
        return self._file.write(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self._file.close()

    def __getattr__(self, name: str):
        return getattr(self._file, name)


def full_disk(monkeypatch: Any, module: Any, after: int = 0,
              fail_on_name: Optional[str] = None) -> None:
    """Makes the files ``module`` opens for writing (through ``open``) fail with ENOSPC after
    ``after`` bytes; with ``fail_on_name``, only the file of that name, at once."""
    import builtins

    def fake_open(file, mode="r", *args, **kwargs):
        f = builtins.open(file, mode, *args, **kwargs)
        if not any(c in mode for c in "wax+"):
            return f
        if fail_on_name is not None:
            return _FullFile(f, 0) if Path(file).name == fail_on_name else f
        return _FullFile(f, after)

    monkeypatch.setattr(module, "open", fake_open, raising=False)


def write_adult(root: Path, rng: np.random.Generator, n_train: int, n_test: int) -> None:
    """``root/adult.data`` and ``root/adult.test`` as UCI writes them (the test file's ``|1x3
    Cross validator`` line and labels ending in ``.``), with ``?`` for some missing values and
    a Doctorate in every fourth row."""
    root.mkdir(parents=True, exist_ok=True)
    for name, n, end in (("adult.data", n_train, ""), ("adult.test", n_test, ".")):
        lines = ["|1x3 Cross validator"] if name == "adult.test" else []
        for i in range(n):
            education = ["Doctorate", "Bachelors", "HS-grad", "Masters"][i % 4]
            label = ">50K" if rng.random() < 0.3 else "<=50K"
            lines.append(
                f"{rng.integers(17, 90)}, {['Private', '?', 'State-gov'][i % 3]}, "
                f"{rng.integers(10**4, 10**6)}, {education}, {rng.integers(1, 17)}, "
                f"Never-married, {['Adm-clerical', '?'][i % 2]}, Not-in-family, White, "
                f"{['Male', 'Female'][i % 2]}, {rng.integers(0, 5000)}, 0, "
                f"{rng.integers(1, 99)}, United-States, {label}{end}")
        (root / name).write_text("\n".join(lines) + "\n")


def write_image_folder(root: Path, rng: np.random.Generator, per_class: Dict[str, int],
                       size: int = 12, suffix: str = ".png") -> None:
    """``root/train/<class>/NNN<suffix>`` (``per_class`` images of each class) and
    ``root/test/<class>/*`` (a third as many, at least one), RGB ``size`` x ``size``."""
    from PIL import Image

    for split, share in (("train", 1.0), ("test", 1 / 3)):
        for c, n in per_class.items():
            (root / split / c).mkdir(parents=True, exist_ok=True)
            for i in range(max(1, int(n * share))):
                pixels = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
                Image.fromarray(pixels, "RGB").save(root / split / c / f"{i:03d}{suffix}")
