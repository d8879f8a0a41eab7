"""``image-folder``: images kept as files in class subfolders, the form users keep their own
images in, split across clients by a partition scheme as the vision data sets are.

=====================================  ==========================================================
``DIR/train/<class>/*``,               the two splits as given (CIFAR-10's JPEG copy, ImageNet
``DIR/test/<class>/*``                 style folders); every test class must be a training class
``DIR/<class>/*``                      one folder: each class's images in name order, the first
                                       80 % (:func:`~fastfair.sim.data.base.split_sizes`) train,
                                       the rest test
=====================================  ==========================================================

The classes are the training subfolders in name order (label 0 is the first). Files ending in
``.jpg``, ``.jpeg``, ``.png``, ``.bmp`` or ``.gif`` (any case) are images; other files (a
``Thumbs.db``, a ``.DS_Store``) are skipped. Images are decoded with Pillow, every image to the
first one's channels (``L``, one channel, when that one is greyscale; ``RGB`` otherwise) and
held as uint8 ``[n, C, H, W]``; they must all have the first one's size (resize them first).

Decoding is slow (about 0.8 ms per 32x32 JPEG, 50 s for CIFAR-10's 60,000 on one loaded core),
so the decoded arrays are cached as ``.npy`` files, keyed by every image's path, size and
modification time, in ``$FASTFAIR_CACHE_DIR`` (default ``$XDG_CACHE_HOME/fastfair``, else
``~/.cache/fastfair``) under ``image-folder/``, with a SHA-256 digest of each decoded array;
the next run on unchanged files memory-maps them once their digests match (cached arrays
changed or truncated since are decoded again, with a warning). Nothing is ever written beside
the images.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from typing import Any, Dict, List, Optional, Tuple

import numpy as np

from fastfair._files import atomic, read_json_file
from fastfair.sim.data.base import split_sizes
from fastfair.sim.data.vision import SplitArrays

LOGGER = logging.getLogger("fastfair.sim.data")
#: The file endings read as images (compared in lower case).
IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".gif")
#: Bumped when the cached arrays change meaning, so old caches are not read.
CACHE_VERSION = 1
#: The file of a cache folder holding :func:`array_digests` of its arrays.
DIGESTS = "digests.json"


def cache_dir() -> str:
    """Where decoded data sets are cached: ``$FASTFAIR_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/fastfair``, else ``~/.cache/fastfair``."""
    given = os.environ.get("FASTFAIR_CACHE_DIR")
    if given:
        return given
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "fastfair")


def _images_of(folder: str) -> List[Tuple[str, str]]:
    """``(path, stamp)`` of the image files of one class folder, in name order; the stamp is
    the file's size and modification time (one ``stat`` each: :func:`os.scandir` knows which
    entries are files)."""
    found = []
    with os.scandir(folder) as entries:
        for entry in entries:
            if entry.name.lower().endswith(IMAGE_SUFFIXES) and entry.is_file():
                st = entry.stat()
                found.append((entry.path, f"{st.st_size}:{st.st_mtime_ns}"))
    return sorted(found)


def _class_folders(folder: str) -> List[str]:
    return sorted(d for d in os.listdir(folder) if os.path.isdir(os.path.join(folder, d)))


def array_digests(images: Dict[str, np.ndarray]) -> Dict[str, str]:
    """``{split: SHA-256 hex}`` of each decoded array: its shape, dtype and pixels. The cache
    keeps them beside the arrays and checks them whenever it reads the arrays back."""
    out = {}
    for split, array in sorted(images.items()):
        digest = hashlib.sha256(f"{array.dtype.str}{array.shape}".encode())
        digest.update(np.ascontiguousarray(array).tobytes())
        out[split] = digest.hexdigest()
    return out


def list_images(data_dir: str
                ) -> Tuple[List[str], Dict[str, Tuple[List[str], np.ndarray]], str]:
    """``(classes, {split: (paths, labels [n] int64)}, digest)`` of an image folder (the
    layouts of the module docstring). The digest (hex) changes with any image's path (relative
    to ``data_dir``), size, modification time or label, and with an image added or removed.
    ValueError naming the folder when it holds no class subfolder with images, or a test class
    that is no training class."""
    train_dir, test_dir = os.path.join(data_dir, "train"), os.path.join(data_dir, "test")
    two = os.path.isdir(train_dir) and os.path.isdir(test_dir)
    source = train_dir if two else data_dir
    listed = {c: _images_of(os.path.join(source, c)) for c in _class_folders(source)}
    classes = [c for c, images in listed.items() if images]
    if not classes:
        endings = ", ".join(IMAGE_SUFFIXES)
        raise ValueError(f"{data_dir} holds no class subfolders with images ({endings}): give "
                         "train/<class>/* and test/<class>/*, or <class>/*")
    index = {c: i for i, c in enumerate(classes)}
    out: Dict[str, Tuple[List[Tuple[str, str]], List[int]]] = {"train": ([], []),
                                                               "test": ([], [])}
    if two:
        for split, folder in (("train", train_dir), ("test", test_dir)):
            for c in _class_folders(folder):
                images = listed[c] if split == "train" else _images_of(os.path.join(folder, c))
                if images and c not in index:
                    raise ValueError(f"{folder}/{c} holds test images of a class with no "
                                     f"training images in {train_dir}")
                out[split][0].extend(images)
                out[split][1].extend([index.get(c, -1)] * len(images))
    else:
        for c in classes:
            images = listed[c]
            n_train = int(split_sizes(np.array([len(images)]))[0][0])
            for split, part in (("train", images[:n_train]), ("test", images[n_train:])):
                out[split][0].extend(part)
                out[split][1].extend([index[c]] * len(part))
    digest = hashlib.sha256(f"{CACHE_VERSION}".encode())
    start = len(os.path.join(data_dir, ""))
    for split, (images, labels) in out.items():
        digest.update("\n".join(f"{split}|{path[start:]}|{stamp}|{label}"
                                for (path, stamp), label in zip(images, labels)).encode())
    files = {s: ([path for path, _ in images], np.array(labels, dtype=np.int64))
             for s, (images, labels) in out.items()}
    return classes, files, digest.hexdigest()[:32]


def _pixels(img: Any, mode: str, path: str) -> np.ndarray:
    """``[H, W]`` (``L``) or ``[H, W, 3]`` (``RGB``) uint8 pixels of the Pillow image ``img``.
    16-bit greyscale is scaled to 0-255 (``round(v * 255 / 65535)``; Pillow's own conversion
    clips it to 255); 32-bit integer or float pixels, whose range is unknown, are refused
    naming ``path``."""
    if img.mode.startswith("I;16"):
        wide = np.asarray(img).astype(np.uint32)
        grey = ((wide * 255 + 32767) // 65535).astype(np.uint8)
        return grey if mode == "L" else np.repeat(grey[:, :, None], 3, axis=2)
    if img.mode in ("I", "F"):
        raise ValueError(f"{path} holds 32-bit {'float' if img.mode == 'F' else 'integer'} "
                         "pixels, whose 0-255 scale is unknown: save it as an 8- or 16-bit "
                         "image")
    return np.asarray(img.convert(mode))


def decode_images(paths: List[str]) -> np.ndarray:
    """``[n, C, H, W]`` uint8 of the image files ``paths`` (Pillow), every one converted to the
    first one's channels (``L`` when it is greyscale, else ``RGB``; 16-bit greyscale scaled to
    0-255); ValueError naming the file that cannot be read, has another size or 32-bit
    pixels."""
    from PIL import Image

    out: Optional[np.ndarray] = None
    mode = "RGB"
    for j, path in enumerate(paths):
        try:
            with Image.open(path) as img:
                if out is None:
                    mode = "L" if img.mode in ("1", "L", "I", "I;16", "F") else "RGB"
                    out = np.empty((len(paths), 1 if mode == "L" else 3, img.height, img.width),
                                   dtype=np.uint8)
                pixels = _pixels(img, mode, path)
        except (OSError, SyntaxError, Image.DecompressionBombError) as exc:
            raise ValueError(f"{path} is not a readable image ({type(exc).__name__}: "
                             f"{exc})") from None
        assert out is not None  # made from the first image above
        if pixels.shape[:2] != out.shape[2:]:
            raise ValueError(f"{path} is {pixels.shape[1]}x{pixels.shape[0]} but {paths[0]} is "
                             f"{out.shape[3]}x{out.shape[2]}: image-folder needs one size "
                             "(resize the images first)")
        out[j] = pixels.reshape(pixels.shape[0], pixels.shape[1], -1).transpose(2, 0, 1)
    return out if out is not None else np.zeros((0, 3, 1, 1), np.uint8)


def load_image_folder(data_dir: str, *, cache: bool = True
                      ) -> Tuple[List[str], Dict[str, np.ndarray], Dict[str, np.ndarray]]:
    """``(classes, images {split: [n, C, H, W] uint8}, labels {split: [n] int64})`` of an image
    folder, decoded, or memory-mapped from the cache (:func:`cache_dir`: a folder per set of
    files holding ``train.npy`` and ``test.npy``) when the files are unchanged; ``cache`` False
    neither reads nor writes it."""
    classes, files, digest = list_images(data_dir)
    folder = os.path.join(cache_dir(), "image-folder", digest)
    labels = {s: files[s][1] for s in files}
    if cache:
        try:
            images = {s: np.load(os.path.join(folder, f"{s}.npy"), mmap_mode="r",
                                 allow_pickle=False) for s in files}
            recorded = read_json_file(os.path.join(folder, DIGESTS), "image cache digests")
            if all(images[s].dtype == np.uint8 and images[s].ndim == 4
                   and len(images[s]) == len(labels[s]) for s in files):
                if recorded == array_digests(images):
                    return classes, images, labels
                LOGGER.warning("image-folder: the cached arrays in %s differ from those decoded "
                               "(changed or truncated); decoding %s again", folder, data_dir)
        except (OSError, ValueError):
            pass  # absent or damaged: decoded again and written anew
    started = time.perf_counter()
    images = {s: decode_images(files[s][0]) for s in files}
    shapes = {s: images[s].shape[1:] for s in images if len(images[s])}
    if len(set(shapes.values())) > 1:
        raise ValueError(f"{data_dir}: the train images are {list(shapes['train'])} but the test "
                         f"images {list(shapes['test'])} (channels, height, width): give both "
                         "splits one size and colour mode")
    note = ""
    if cache:
        os.makedirs(folder, exist_ok=True)
        for split, array in images.items():
            partial = os.path.join(folder, f"{split}.{os.getpid()}.partial.npy")
            np.save(partial, array)
            os.replace(partial, os.path.join(folder, f"{split}.npy"))
        with atomic(os.path.join(folder, DIGESTS), text=True) as f:
            f.write(json.dumps(array_digests(images)))
        note = f"; cached in {folder}"
    LOGGER.info("image-folder: decoded %d images of %s in %.1f s%s",
                sum(len(v) for v in images.values()), data_dir, time.perf_counter() - started,
                note)
    return classes, images, labels


class ImageFolder(SplitArrays):
    """The images of ``data_dir`` (:func:`list_images`' layouts), split across ``clients`` by
    ``partition`` ('iid', 'dirichlet' with ``alpha``, 'pathological' with
    ``classes_per_client``); ``classes``: the class names, label ``i`` is ``classes[i]``."""

    def __init__(self, data_dir: str, clients: int, *, partition: str = "dirichlet",
                 alpha: float = 0.3, classes_per_client: int = 2, seed: int = 0,
                 cache: bool = True) -> None:
        self.classes, images, labels = load_image_folder(data_dir, cache=cache)
        shape = images["train"].shape[1:]
        for split in ("train", "test"):
            images[split] = images[split].reshape((-1,) + shape)
        super().__init__(images, labels, shape, len(self.classes), clients=clients,
                         partition=partition, alpha=alpha, classes_per_client=classes_per_client,
                         seed=seed)
