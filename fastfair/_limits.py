"""Bounds on what a file may make the reader build, checked before the reader builds it.

A parsed document (YAML, JSON, TOML) is checked as parsed, without expanding its shared nodes:
a YAML alias is one node however often it is referred to, so a few hundred bytes can stand for
billions of values (nine levels of nine aliases are 9**9 leaves). :func:`check_tree` counts the
values the document holds once every alias is expanded, in time linear in its distinct nodes,
and refuses it, naming the file, before anything walks or copies it. An ``.npz`` array's header
is checked against the bytes its zip entry and the file can hold (:func:`npz_array_header`)
before the array is allocated.
"""

from __future__ import annotations

import math
import zipfile
from typing import Any, Dict, List, Tuple

import numpy as np

#: The most a deflated zip entry can expand (deflate's limit is about 1032 to 1).
MAX_DEFLATE_RATIO = 1100
#: Most values (scalars, lists and tables, each alias expanded) in one configuration document.
MAX_VALUES = 100_000
#: Deepest nesting of lists and tables in one configuration document.
MAX_DEPTH = 32


def check_tree(value: Any, where: str, *, max_values: int = MAX_VALUES,
               max_depth: int = MAX_DEPTH) -> None:
    r"""Refuses a parsed document larger or deeper than the bounds, without expanding aliases.

    The expanded size of a node is :math:`s(v) = 1 + \sum_{c \in children(v)} s(c)`, memoised
    per distinct list or dict (O(distinct nodes) time), and its depth
    :math:`d(v) = 1 + \max_c d(c)`.

    Parameters
    ----------
    value
        The parsed document (dicts, lists and scalars; shared nodes allowed).
    where
        The file, for the message.
    max_values, max_depth
        The bounds on :math:`s` and :math:`d` of the whole document.

    Raises
    ------
    ValueError
        Naming ``where``: a node that contains itself (a recursive YAML alias), more than
        ``max_depth`` levels, or more than ``max_values`` values once aliases are expanded.
    """
    sizes: Dict[int, Tuple[int, int]] = {}  # id of a list/dict -> (expanded size, depth)
    # An explicit stack: a document nested past Python's recursion limit must not crash here.
    stack: List[Tuple[Any, bool]] = [(value, False)]
    open_nodes: set = set()
    keep: List[Any] = []  # holds every node whose id is memoised, so that no id is reused
    while stack:
        node, done = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        key = id(node)
        children = list(node.values()) if isinstance(node, dict) else node
        if done:
            open_nodes.discard(key)
            size, depth = 1, 1
            for child in children:
                s, d = sizes.get(id(child), (1, 0)) if isinstance(child, (dict, list)) \
                    else (1, 0)
                size, depth = size + s, max(depth, d + 1)
            if depth > max_depth:
                raise ValueError(f"{where} nests lists and tables {depth} levels deep; a "
                                 f"configuration holds at most {max_depth}")
            if size > max_values:
                raise ValueError(f"{where} holds more than {max_values} values once its YAML "
                                 "aliases (&name, *name) are expanded; a configuration holds "
                                 "at most that many: write the values out, or split the file")
            sizes[key] = (size, depth)
            keep.append(node)
            continue
        if key in sizes:
            continue
        if key in open_nodes:
            raise ValueError(f"{where} holds a list or table that contains itself (a YAML "
                             "alias to an enclosing node); a configuration must be finite")
        if len(open_nodes) >= max_depth:
            raise ValueError(f"{where} nests lists and tables more than {max_depth} levels "
                             f"deep; a configuration holds at most {max_depth}")
        open_nodes.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in children)


def npz_array_header(zf: zipfile.ZipFile, member: str, where: str,
                     file_bytes: int) -> Tuple[Tuple[int, ...], np.dtype]:
    """Shape and dtype of array ``member`` of an open ``.npz``, read from its header alone and
    checked against the sizes the file can hold, before anything allocates the array.

    The zip entry ``member + ".npy"`` must not declare more compressed bytes than the file
    (``file_bytes``) holds, nor more uncompressed bytes than its compression can give
    (stored: equal; deflated: at most :data:`MAX_DEFLATE_RATIO` times); the ``.npy`` header's
    ``prod(shape) * itemsize`` must equal the entry's bytes after the header.

    Returns
    -------
    ``(shape, dtype)`` of the array.

    Raises
    ------
    ValueError
        Naming ``where`` and the entry: sizes that cannot be true of the file (a 200-byte file
        declaring terabytes), or an array of Python objects.
    """
    info = zf.getinfo(member + ".npy")
    if info.compress_size > file_bytes or (
            info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size) \
            or (info.compress_type == zipfile.ZIP_DEFLATED
                and info.file_size > MAX_DEFLATE_RATIO * info.compress_size + 4096):
        raise ValueError(f"{where}: its zip entry {member}.npy declares {info.file_size} bytes "
                         f"from {info.compress_size}; the file is corrupted")
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        read = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                else np.lib.format.read_array_header_2_0)
        shape, _, dtype = read(f)
        start = f.tell()
    shape = tuple(int(d) for d in shape)
    if dtype.hasobject:
        raise ValueError(f"{where}: {member} holds Python objects ({dtype}); it needs numbers "
                         "(it is never unpickled)")
    nbytes = math.prod(shape) * dtype.itemsize
    if start + nbytes != info.file_size:
        raise ValueError(f"{where}: {member} declares {list(shape)} {dtype} ({nbytes} bytes) "
                         f"but its entry holds {info.file_size - start}; the file is corrupted")
    return shape, dtype
