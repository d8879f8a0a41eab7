"""Flower arrays as NumPy arrays and back, without copying: ``.npy`` bytes read in place."""

from __future__ import annotations

import io
from typing import Dict, Tuple

import numpy as np
from flwr.app import Array
from flwr.common.constant import SType

_HEADERS: Dict[bytes, Tuple[np.dtype, Tuple[int, ...], bool, int]] = {}


def _npy_header(data: bytes) -> Tuple[np.dtype, Tuple[int, ...], bool, int]:
    """(dtype, shape, fortran_order, data offset) of ``.npy`` bytes, parsed once per distinct
    header (a model's arrays repeat the same few headers in every reply)."""
    # Versions 1.0 and 2.0 give the header length as a little-endian uint16 / uint32.
    size = 2 if data[6:8] == b"\x01\x00" else 4
    end = 8 + size + int.from_bytes(data[8:8 + size], "little")
    key = data[:end]
    info = _HEADERS.get(key)
    if info is None:
        stream = io.BytesIO(key)
        try:  # an untrusted header: NumPy's parser raises ValueError, SyntaxError, TokenError...
            version = np.lib.format.read_magic(stream)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(stream)
            else:
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(stream)
        except Exception as exc:
            raise ValueError(f"the array's .npy header is unreadable ({type(exc).__name__}: "
                             f"{exc})") from None
        if dtype.hasobject:
            raise TypeError("array holds Python objects; only numeric arrays can be aggregated")
        info = (dtype, tuple(shape), bool(fortran), end)
        if len(_HEADERS) < 4096:
            _HEADERS[key] = info
    return info


def array_to_numpy(array: Array) -> np.ndarray:
    """A Flower :class:`~flwr.app.Array` as a read-only NumPy view of its serialized bytes.

    Flower stores arrays in the ``.npy`` format; the header is parsed (once per distinct header)
    and the data are viewed in place (``Array.numpy()`` copies them). Fortran-ordered data come
    back as a C-ordered copy; ``.npy`` format 3.0 (non-ASCII field names) is read by copying.

    Returns
    -------
    ``np.ndarray`` of the array's shape and dtype (no copy for C-ordered data).
    """
    if array.stype != SType.NUMPY:
        raise TypeError(f"array has serialization {array.stype!r}; fastfair reads "
                        f"{SType.NUMPY!r} (arrays built from NumPy or torch)")
    data = array.data
    if data[6:8] not in (b"\x01\x00", b"\x02\x00"):
        try:  # Flower's reader (np.load without pickles), on untrusted bytes
            return array.numpy()
        except Exception as exc:
            raise ValueError(f"the array's .npy bytes are unreadable ({type(exc).__name__}: "
                             f"{exc})") from None
    dtype, shape, fortran, offset = _npy_header(data)
    count = int(np.prod(shape, dtype=np.int64))
    flat = np.frombuffer(data, dtype=dtype, count=count, offset=offset)
    if fortran:
        return flat.reshape(shape[::-1]).T.copy(order="C")
    return flat.reshape(shape)


def numpy_to_array(x: np.ndarray) -> Array:
    """A NumPy array as a Flower :class:`~flwr.app.Array` (``.npy`` bytes, one copy of the data;
    ``Array(ndarray)`` makes two)."""
    if not x.flags.c_contiguous:  # (np.ascontiguousarray would turn a 0-d array into 1-d)
        x = x.copy(order="C")
    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(header, np.lib.format.header_data_from_array_1_0(x))
    data = header.getvalue() + x.reshape(-1).view(np.uint8).data
    return Array(dtype=str(x.dtype), shape=tuple(int(s) for s in x.shape), stype=SType.NUMPY,
                 data=data)
