"""Files every reader and writer of fastfair shares, with NumPy alone: files are opened only
when they are regular files (:func:`open_regular`, :func:`check_regular_file`,
:func:`read_regular_file`, :func:`read_json_file`), so a named pipe or device in place of one is
refused instead of blocking; every output file is written whole or not at all (:func:`atomic`),
and a failed write names its file (:func:`writing`, :class:`FileWriteError`: "no space left on
device while writing PATH"), whichever writer failed."""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from typing import Any, BinaryIO, Iterator, Optional, Union

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
    """A writable file that remembers the first OSError of its writes, which some writers
    report as another error (``torch.save``: a ``RuntimeError``, "unexpected pos 64 vs 0");
    other attributes (``seek``, ``tell``) are the file's."""

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

    def __getattr__(self, name: str) -> Any:
        return getattr(self.file, name)

    def flush(self) -> None:
        try:
            self.file.flush()
        except OSError as exc:
            if self.error is None:
                self.error = exc
            raise


def _remove(path: PathLike) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


@contextlib.contextmanager
def atomic(path: PathLike, text: bool = False) -> Iterator[Any]:
    """The one way fastfair writes an output file (models, checkpoints, state, CSV, JSON):
    a file to write ``path``'s content into, in binary or, with ``text``, UTF-8 text (lines
    end in ``\n`` as written).

    The block writes into ``path + ".tmp"``, renamed over ``path`` when the block ends, so a
    kill mid-write never leaves a torn file and a failed write leaves the earlier file as it
    was. A write that fails (a full disk) raises :class:`FileWriteError` naming ``path``,
    also where the writer reported it as another error (``torch.save``: a ``RuntimeError``);
    the temporary file is removed.
    """
    tmp = os.fspath(path) + ".tmp"
    try:
        with (open(tmp, "w", encoding="utf-8", newline="") if text else open(tmp, "wb")) as f:
            out = _Recorded(f)
            try:
                yield out
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
