"""Checkpoints that cannot run code: tensors, arrays and plain values only, written atomically.

A checkpoint is a ``torch.save`` file of dicts, lists, tuples, strings, numbers, None and tensors;
NumPy arrays travel as tensors tagged so that they come back as NumPy arrays. It is read with
``torch.load(weights_only=True)``, which refuses anything else, so opening a run folder from an
untrusted source cannot execute code.

The module also holds the file guards every reader and writer of the simulator shares: files are
opened only when they are regular files (:func:`open_regular`, :func:`check_regular_file`,
:func:`read_regular_file`, :func:`read_json_file`), so a named pipe or device in place of one is
refused instead of blocking, and a failed write names its file (:func:`writing`,
:class:`FileWriteError`: "no space left on device while writing PATH").
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from pathlib import Path
from typing import IO, Any, BinaryIO, Iterator, Optional, Tuple, Union, cast

import numpy as np
import torch

_NDARRAY = "__fastfair_ndarray__"
#: The keys under which a checkpoint holds models (every floating value below must be finite).
MODEL_KEYS = ("params", "local", "synthetic", "models")

PathLike = Union[str, "os.PathLike[str]"]


# ------------------------------------------------------------------------ reading files
def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "not a file"


def _not_regular(path: PathLike, mode: int) -> ValueError:
    return ValueError(f"{os.fspath(path)} is not a regular file ({_kind(mode)}); replace it "
                      "with the file itself")


def check_regular_file(path: PathLike) -> os.stat_result:
    """``os.stat(path)`` when ``path`` is a regular file (links followed); ValueError naming
    it when it is missing or something else (a named pipe, a directory, a device), so that no
    reader ever blocks on it."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"{os.fspath(path)} does not exist") from None
    except OSError as exc:
        raise ValueError(f"{os.fspath(path)} cannot be read ({exc.strerror or exc})") from None
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path, st.st_mode)
    return st


def open_regular(path: PathLike) -> BinaryIO:
    """``path`` opened for binary reading, refused (ValueError naming it) unless it is a
    regular file. The file is opened without blocking and checked on the open descriptor
    (``fstat``), so a named pipe is refused without ever being waited on, even one put in the
    file's place after an earlier check."""
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0) \
        | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise ValueError(f"{os.fspath(path)} does not exist") from None
    except IsADirectoryError:
        raise ValueError(f"{os.fspath(path)} is not a regular file (a directory); replace it "
                         "with the file itself") from None
    except OSError as exc:
        raise ValueError(f"{os.fspath(path)} cannot be read ({exc.strerror or exc})") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise _not_regular(path, st.st_mode)
        if getattr(os, "O_NONBLOCK", 0):
            os.set_blocking(fd, True)
        return os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise


def read_regular_file(path: PathLike, what: str = "file",
                      max_bytes: Optional[int] = None) -> bytes:
    """The bytes of the regular file ``path`` (``what`` it is, for the message); ValueError
    naming it when it is missing, not a regular file, unreadable, or longer than
    ``max_bytes`` (None: no bound)."""
    with open_regular(path) as f:
        try:
            data = f.read() if max_bytes is None else f.read(max_bytes + 1)
        except OSError as exc:
            raise ValueError(f"{os.fspath(path)} ({what}) cannot be read "
                             f"({exc.strerror or exc})") from None
    if max_bytes is not None and len(data) > max_bytes:
        raise ValueError(f"{os.fspath(path)} ({what}) is longer than {max_bytes} bytes, the "
                         f"most a {what} may hold")
    return data


def loads_json(data: Union[bytes, str], where: str) -> Any:
    """JSON text (bytes: UTF-8, ``\\u`` escapes or not) parsed; ValueError starting with
    ``where`` for text that is not UTF-8, not JSON, or nested too deeply to parse."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ValueError(f"{where} is not UTF-8 text (byte {exc.start})") from None
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError(f"{where} is not valid JSON: nested too deeply") from None
    except ValueError as exc:
        raise ValueError(f"{where} is not valid JSON ({exc})") from None


def read_json_file(path: PathLike, what: str = "JSON file") -> Any:
    """The JSON value in the regular file ``path``; one ValueError naming the file for every
    way it can be wrong (missing, a named pipe, not UTF-8, not JSON, nested too deeply)."""
    return loads_json(read_regular_file(path, what), f"{os.fspath(path)} ({what})")


# ------------------------------------------------------------------------ writing files
class FileWriteError(OSError):
    """A write that failed, with a message naming the file ("no space left on device while
    writing PATH"); ``errno`` and ``filename`` are the failed call's."""

    def __str__(self) -> str:
        return str(self.strerror)


_REASONS = {errno.ENOSPC: "no space left on device", errno.EROFS: "read-only file system",
            errno.EACCES: "permission denied", errno.EFBIG: "file too large"}
if hasattr(errno, "EDQUOT"):
    _REASONS[errno.EDQUOT] = "disk quota exceeded"


def write_error(exc: OSError, path: PathLike) -> OSError:
    """``exc`` (an OSError of a write to ``path``) as a :class:`FileWriteError` naming
    ``path``."""
    if isinstance(exc, FileWriteError):
        return exc
    reason = _REASONS.get(exc.errno or 0) or (exc.strerror or str(exc) or type(exc).__name__)
    err = FileWriteError(exc.errno, f"{reason} while writing {os.fspath(path)}")
    err.filename = os.fspath(path)
    return err


@contextlib.contextmanager
def writing(path: PathLike) -> Iterator[None]:
    """Turns every OSError raised in its block into :func:`write_error` for ``path``."""
    try:
        yield
    except OSError as exc:
        raise write_error(exc, path) from None


class _Recorded:
    """A writable file that remembers the first OSError of its writes: ``torch.save``
    reports one as a ``RuntimeError`` ("unexpected pos 64 vs 0")."""

    error: Optional[OSError]

    def __init__(self, file: Any) -> None:
        self.file, self.error = file, None

    def write(self, data: Any) -> int:
        try:
            return self.file.write(data)
        except OSError as exc:
            if self.error is None:
                self.error = exc
            raise

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as exc:
            if self.error is None:
                self.error = exc
            raise


def _remove(path: Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


# -------------------------------------------------------------------------- checkpoints
def to_plain(value: Any) -> Any:
    """``value`` with NumPy arrays as tagged tensors and NumPy scalars as Python numbers."""
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(to_plain(v) for v in value)
    if isinstance(value, np.ndarray):
        return {_NDARRAY: torch.from_numpy(np.ascontiguousarray(value).copy())}
    if isinstance(value, np.generic):
        return value.item()
    return value


def from_plain(value: Any) -> Any:
    """The inverse of :func:`to_plain`."""
    if isinstance(value, dict):
        if set(value) == {_NDARRAY}:
            return value[_NDARRAY].numpy()
        return {k: from_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(from_plain(v) for v in value)
    return value


def save(path: Path, payload: Any) -> None:
    """Writes ``payload`` to ``path`` atomically (a kill mid-write never leaves a torn file).

    It is written to ``path.tmp``, then renamed over ``path``: a write that fails (a full disk:
    :class:`FileWriteError` "no space left on device while writing PATH") removes the
    temporary file and leaves the earlier checkpoint as it was."""
    path = Path(path)
    tmp = Path(str(path) + ".tmp")
    plain = to_plain(payload)
    try:
        with open(tmp, "wb") as f:
            out = _Recorded(f)
            try:
                torch.save(plain, cast(IO[bytes], out))  # a file object to torch.save
            except Exception:
                if out.error is not None:
                    raise out.error from None
                raise
        os.replace(tmp, path)
    except BaseException as exc:
        _remove(tmp)
        if isinstance(exc, OSError):
            raise write_error(exc, path) from None
        raise


def _first_bad(value: torch.Tensor) -> Optional[Tuple[str, Any]]:
    """``("NaN" or "inf", index)`` of the first non-finite element of a floating tensor."""
    if not (value.is_floating_point() or value.is_complex()) or value.numel() == 0:
        return None
    finite = torch.isfinite(value)
    if bool(finite.all()):
        return None
    flat = int(torch.nonzero(~finite.reshape(-1))[0, 0])
    index: Any = flat if value.dim() == 1 else tuple(
        int(i) for i in np.unravel_index(flat, tuple(value.shape)))
    return ("NaN" if bool(torch.isnan(value.reshape(-1)[flat])) else "inf"), index


def _check_models(value: Any, where: str, field: str = "", model: bool = False) -> None:
    """Raises ValueError naming the field when a floating tensor under a key of
    :data:`MODEL_KEYS` holds NaN or inf."""
    if isinstance(value, dict):
        for k, v in value.items():
            name = f"{field}.{k}" if field else str(k)
            _check_models(v, where, name, model or k in MODEL_KEYS)
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            _check_models(v, where, f"{field}[{i}]", model)
    elif model and isinstance(value, torch.Tensor):
        bad = _first_bad(value)
        if bad is not None:
            raise ValueError(f"{where}: {field} has {bad[0]} at index {bad[1]}; the run that "
                             "wrote it diverged or the file was changed: start a new run")


def load(path: Path) -> Any:
    """Reads a checkpoint written by :func:`save`; a missing, non-regular (a named pipe),
    truncated, corrupted or foreign file, or one whose models hold NaN or inf, raises
    ValueError saying which and what to do."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise ValueError(f"{path} does not exist: the run saved no checkpoint (it ran with "
                         "checkpoint_every 0, or stopped before its first); start a new run")
    with open_regular(path) as f:
        try:
            payload = torch.load(f, weights_only=True, map_location="cpu")
        except Exception as exc:  # torch raises many types for a bad file; all mean the same
            raise ValueError(f"{path} is not a readable fastfair checkpoint "
                             f"({type(exc).__name__}: "
                             f"{str(exc).splitlines()[0] if str(exc) else 'no detail'}); it may "
                             "be truncated or corrupted: start a new run") from None
    try:
        _check_models(payload, str(path))
        return from_plain(payload)
    except RecursionError:
        raise ValueError(f"{path} is not a fastfair checkpoint: it is nested too deeply") \
            from None
