"""Random access into LEAF's JSON files without reading them whole.

A LEAF file is ``{"users": [...], "num_samples": [...], "user_data": {user: {"x": [...], "y":
[...]}, ...}}`` written by ``json.dump`` (other keys, such as ``hierarchies``, may follow). The
header (users and their sample counts) sits at the top, so opening a file reads a few kilobytes.
A user's entry is found by interpolation: its byte offset is guessed from the sample counts of
the users before it (entries are laid out in the order of ``users``, each about proportional to
its samples), a window around the guess is searched for user keys, and the search narrows between
the keys it has seen. A found offset is remembered. Out-of-order or foreign files fall back to
one scan of the file, so every file that is valid JSON of this shape is read correctly.

Files are JSON text in UTF-8, with non-ASCII text written as is or as ``\\u`` escapes
(``json.dump``'s default); both give the same user names and entries. Only regular files are
opened (a named pipe in a file's place is refused, never waited on), and a file that is not
such JSON (not UTF-8, nested too deeply, counts it cannot hold) is one ValueError naming it,
as is a user key that the part of ``user_data`` read holds twice (``json`` would keep the last
silently).
"""

from __future__ import annotations

import bisect
import json
import os
import re
from typing import Any, AnyStr, Dict, List, Tuple

import numpy as np

from fastfair._files import loads_json, open_regular

_SPACE = re.compile(rb"\s*")
_WINDOW = 1 << 18
_DECODER = json.JSONDecoder()
_PIXEL_TEXT = np.zeros(256, dtype=bool)   # the bytes of an array of arrays of plain decimals
_PIXEL_TEXT[list(b" \t\r\n[],.0123456789")] = True


def _name(raw: bytes) -> str:
    """A user name from the bytes between its quotes (JSON escapes and UTF-8 decoded), or ''
    when they are not a JSON string."""
    try:
        return json.loads(b'"' + raw + b'"')
    except ValueError:
        return ""


def _escaped(chunk: bytes, quote: int) -> bool:
    """Whether the quote at ``quote`` is escaped (an odd run of backslashes before it)."""
    start = quote
    while start > 0 and chunk[start - 1] == 0x5C:
        start -= 1
    return (quote - start) % 2 == 1


def _skip(space: re.Pattern[AnyStr], text: AnyStr, pos: int) -> int:
    """Where the run of whitespace ``space`` (``\\s*``, which also matches nothing) that starts
    at ``pos`` of ``text`` ends."""
    match = space.match(text, pos)
    assert match is not None  # \s* matches the empty string
    return match.end()


class LeafFile:
    """One LEAF JSON file: ``users`` (names), ``num_samples [n]`` and the byte offset of each
    user's entry, found on demand (:meth:`entry_offset`)."""

    def __init__(self, path: str) -> None:
        self.path = path
        self.users, self.num_samples, self.data_start, self.size = _read_header(path)
        self.index = {u: i for i, u in enumerate(self.users)}
        if len(self.index) != len(self.users):
            raise ValueError(f"{path}: 'users' lists a user twice")
        self._weight = np.concatenate([[0], np.cumsum(self.num_samples + 1.0)])
        self._bytes_per_sample = (self.size - self.data_start) / self._weight[-1]
        self._offsets: Dict[int, int] = {}
        self._known: List[int] = []          # the users of _offsets, sorted

    def _read(self, start: int, stop: int) -> bytes:
        with open_regular(self.path) as f:
            f.seek(start)
            return f.read(stop - start)

    def _note_keys(self, chunk: bytes, base: int) -> int:
        """Records the offsets of the user keys (``"name": {``) in ``chunk`` (read at ``base``);
        returns how many it had not seen before. ``bytes.find`` does the scanning: in the
        numbers of an entry the pair ``":`` occurs only after keys."""
        new = 0
        colon = chunk.find(b'":')
        while colon >= 0:
            brace = _skip(_SPACE, chunk, colon + 2)
            if chunk[brace:brace + 1] == b"{":
                quote = chunk.rfind(b'"', 0, colon)
                while quote > 0 and _escaped(chunk, quote):
                    quote = chunk.rfind(b'"', 0, quote)
                j = self.index.get(_name(chunk[quote + 1:colon])) if quote >= 0 else None
                if j is not None and j not in self._offsets:
                    self._offsets[j] = base + brace
                    bisect.insort(self._known, j)
                    new += 1
                elif j is not None and self._offsets[j] != base + brace \
                        and not _escaped(chunk, colon):
                    raise ValueError(f"{self.path}: 'user_data' holds user {self.users[j]!r} "
                                     f"twice (at bytes {self._offsets[j]} and {base + brace}); "
                                     "keep one entry per user")
            colon = chunk.find(b'":', colon + 2)
        return new

    def entry_offset(self, i: int) -> int:
        """Byte offset of the ``{`` that opens user ``i``'s entry."""
        if i in self._offsets:
            return self._offsets[i]
        window = _WINDOW
        while True:
            at = bisect.bisect_left(self._known, i)
            lo_i = self._known[at - 1] if at else -1
            hi_i = self._known[at] if at < len(self._known) else len(self.users)
            lo = self._offsets[lo_i] + 1 if at else self.data_start + 1
            hi = self._offsets[hi_i] if at < len(self._known) else self.size
            if lo >= hi:                            # entries out of the order of users
                return self._scan(i)
            share = ((self._weight[i] - self._weight[lo_i + 1])
                     / max(self._weight[hi_i] - self._weight[lo_i + 1], 1.0))
            guess = lo + int(share * (hi - lo))
            start = max(lo, guess - window // 2)
            stop = min(hi, start + window)
            start = max(lo, stop - window)
            new = self._note_keys(self._read(start, stop), start)
            if i in self._offsets:
                return self._offsets[i]
            if start == lo and stop == hi:
                return self._scan(i)
            if not new:                             # nothing learnt: look wider
                window *= 4

    def _scan(self, i: int) -> int:
        """The whole file searched once (entries out of the order of ``users``)."""
        with open_regular(self.path) as f:
            f.seek(self.data_start + 1)
            self._note_keys(f.read(), self.data_start + 1)
        if i not in self._offsets:
            raise ValueError(f"{self.path}: user {self.users[i]!r} is listed in 'users' but has "
                             "no entry in 'user_data'")
        return self._offsets[i]

    def _entry(self, i: int, complete) -> bytes:
        """The bytes from user ``i``'s ``{`` on, read until ``complete(bytes)`` holds: up to the
        next user's key when its offset is known, else a guess from the sample counts, then
        more as needed."""
        start = self.entry_offset(i)
        following = self._offsets.get(i + 1, -1)
        stop = following if following > start else min(self.size, start + int(
            self._bytes_per_sample * (self.num_samples[i] + 1) * 1.25) + 4096)
        chunk = self._read(start, stop)
        while not complete(chunk):
            if start + len(chunk) >= self.size:
                raise ValueError(f"{self.path}: user {self.users[i]!r}'s entry is not valid "
                                 "JSON")
            chunk += self._read(start + len(chunk), min(self.size, start + 2 * len(chunk)))
        return chunk

    def numeric_entry(self, i: int) -> Tuple[bytes, bytes]:
        """The raw text of user ``i``'s ``x`` and ``y`` arrays, for entries holding numbers only
        (no strings, so the first ``}`` closes the entry)."""
        body = self._entry(i, lambda chunk: b"}" in chunk)
        body = body[:body.index(b"}")]
        keys = {k: body.find(b'"%s"' % k) for k in (b"x", b"y")}
        if min(keys.values()) < 0:
            raise ValueError(f"{self.path}: user {self.users[i]!r}'s entry lacks 'x' or 'y'")
        (k1, p1), (k2, p2) = sorted(keys.items(), key=lambda kv: kv[1])
        parts = {k1: body[p1 + 3:p2], k2: body[p2 + 3:]}
        return parts[b"x"].strip(b" \t\r\n:,"), parts[b"y"].strip(b" \t\r\n:,")

    def json_entry(self, i: int) -> dict:
        """User ``i``'s entry, parsed (``{"x": [...], "y": [...]}``)."""
        parsed = []

        def complete(chunk: bytes) -> bool:
            try:
                parsed.append(_DECODER.raw_decode(chunk.decode("utf-8", "surrogatepass"))[0])
            except (json.JSONDecodeError, UnicodeDecodeError):
                return False
            except RecursionError:
                raise ValueError(f"{self.path}: user {self.users[i]!r}'s entry is nested too "
                                 "deeply to be LEAF JSON") from None
            return True

        self._entry(i, complete)
        return parsed[0]


def _read_header(path: str) -> Tuple[List[str], np.ndarray, int, int]:
    """``(users, num_samples, offset of user_data's '{', file size)`` from the top of the
    file."""
    size = 1 << 16
    with open_regular(path) as f:
        total = os.fstat(f.fileno()).st_size
        while True:
            f.seek(0)
            buf = f.read(size)
            try:
                return (*_parse_header(buf, path, total), total)
            except (json.JSONDecodeError, IndexError):
                if len(buf) >= total:
                    raise ValueError(f"{path} is not a LEAF JSON file (an object with 'users', "
                                     "'num_samples' and 'user_data')") from None
                size *= 8
            except RecursionError:
                raise ValueError(f"{path} is not a LEAF JSON file: its header is nested too "
                                 "deeply") from None


def _value(buf: bytes, text: str, pos: int, path: str) -> Tuple[Any, int]:
    """The JSON value at byte ``pos`` and the offset after it. ``text`` is ``buf`` decoded as
    latin-1 (one character per byte, so positions are byte offsets); the value's bytes are then
    decoded as what they are, UTF-8 JSON text, whichever way its strings are escaped."""
    value, end = _DECODER.raw_decode(text, pos)
    if buf[pos:end].isascii():                  # ASCII (escapes or none): parsed right already
        return value, end
    return loads_json(buf[pos:end], f"{path}: its header"), end


def _parse_header(buf: bytes, path: str, total: int) -> Tuple[List[str], np.ndarray, int]:
    text = buf.decode("latin-1")
    ws = re.compile(r"\s*")
    pos = _skip(ws, text, 3 if buf.startswith(b"\xef\xbb\xbf") else 0)   # a UTF-8 BOM
    if text[pos] != "{":
        raise ValueError(f"{path} does not hold a JSON object")
    found: Dict[str, object] = {}
    pos += 1
    while True:
        pos = _skip(ws, text, pos)
        key, pos = _value(buf, text, pos, path)
        pos = _skip(ws, text, pos)
        if text[pos] != ":":
            raise ValueError(f"{path}: expected ':' after key {key!r}")
        pos = _skip(ws, text, pos + 1)
        if key == "user_data":
            if text[pos] != "{" or not {"users", "num_samples"} <= set(found):
                raise ValueError(f"{path}: LEAF files list 'users' and 'num_samples' before "
                                 "'user_data', an object")
            break
        if key in ("users", "num_samples"):
            found[key], pos = _value(buf, text, pos, path)
        else:                                   # skipped: only its end is needed
            pos = _DECODER.raw_decode(text, pos)[1]
        pos = _skip(ws, text, pos)
        if text[pos] == ",":
            pos += 1
    users = found["users"]
    if not isinstance(users, list) or any(isinstance(u, (list, dict)) for u in users):
        raise ValueError(f"{path}: 'users' must be a list of user names")
    users = [u if isinstance(u, str) else str(u) for u in users]
    try:
        counts = np.asarray(found["num_samples"])
    except (ValueError, TypeError, OverflowError):
        counts = np.zeros(0, dtype=object)
    if counts.shape == (0,) and not users:
        counts = counts.astype(np.int64)
    # A sample takes at least a byte of the file: a larger count is no count of this file.
    if counts.shape != (len(users),) or counts.dtype.kind not in "iu" or (counts < 0).any() \
            or (counts > total).any():
        raise ValueError(f"{path}: 'num_samples' must hold one integer count per user, from 0 "
                         f"to the {total} bytes of the file")
    return users, counts.astype(np.int64), pos


def parse_unit_pixels(text: bytes, width: int) -> np.ndarray:
    """``[n, width]`` pixels from the text of a JSON array of n arrays of ``width`` numbers.

    LEAF writes FEMNIST pixels as ``value / 255`` (Python's shortest float text). When every
    number is such a value in [0, 1] the result is uint8 ``value`` (exact), parsed with
    vectorised byte arithmetic; otherwise it is float32 (parsed by ``json``). A finite number
    outside [0, 1] (0-255 pixels, say) is a ValueError naming the sample and pixel; NaN and
    inf are left for the caller to name."""
    a = np.frombuffer(text, dtype=np.uint8)
    if not (_PIXEL_TEXT[a].all() and text.lstrip()[:1] == b"["):
        return _parse_floats(text, width)
    number = ((a >= 48) & (a <= 57)) | (a == 46)
    edges = np.diff(np.concatenate([[False], number, [False]]).astype(np.int8))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    opens = np.flatnonzero(a == 91)[1:]            # '[' of each row (the first is the outer one)
    per_row = np.diff(np.searchsorted(starts, np.concatenate([opens, [a.size]])))
    if not (per_row == width).all():
        return _parse_floats(text, width)
    # Each number's first 9 bytes: the leading digit, the point and 7 decimals, which pin
    # k / 255 down; bytes past a number's end count as 0.
    chars = np.concatenate([a, np.zeros(9, np.uint8)])[starts[:, None] + np.arange(9)]
    inside = np.arange(9) < (ends - starts)[:, None]
    digits = np.where(inside, chars.astype(np.int16) - 48, 0)
    ok = (digits[:, 0] <= 1) & ((ends - starts == 1) | (chars[:, 1] == 46))
    value = digits[:, 0] + digits[:, 2:] @ (10.0 ** -np.arange(1, 8))
    scaled = value * 255
    k = np.rint(scaled)
    if not (ok.all() and (np.abs(scaled - k) < 1e-3).all() and k.max(initial=0) <= 255):
        return _parse_floats(text, width)
    return k.astype(np.uint8).reshape(opens.size, width)


def _parse_floats(text: bytes, width: int) -> np.ndarray:
    try:
        with np.errstate(over="ignore"):           # past float32's range: inf, then refused
            flat: np.ndarray = np.array(json.loads(text), dtype=np.float32)
    except RecursionError:
        raise ValueError("the samples are nested too deeply") from None
    except (ValueError, TypeError, OverflowError):
        flat = np.zeros(0)
    if flat.ndim != 2 or flat.shape[1] != width:
        raise ValueError(f"expected samples of {width} numbers each")
    outside = np.isfinite(flat) & ((flat < 0) | (flat > 1))   # NaN and inf: named by the caller
    if outside.any():
        i, j = np.argwhere(outside)[0]
        raise ValueError(f"pixels must lie in [0, 1] (LEAF writes value / 255); sample {i} has "
                         f"{flat[i, j]:g} at pixel {j}: divide 0-255 pixels by 255")
    return flat
