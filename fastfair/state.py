"""State that saves the way its users save: every ``state_dict()`` of fastfair (rules, server
optimisers, the Flower strategy) is a :class:`StateDict`, which ``torch.save`` writes so that
``torch.load`` with its defaults (``weights_only=True``) reads it back, and which
:func:`save_state` / :func:`load_state` write and read with NumPy alone. Neither way of loading
can run code: torch's weights-only unpickler, and ``.npz`` read with ``allow_pickle=False`` plus
JSON.

.. code-block:: python

    import fastfair

    agg = fastfair.aggregators.AAggFFD(num_clients=100)
    agg.weights([1, 2, 3], [0.5, 1.0, 2.0])
    fastfair.save_state("rule.npz", agg.state_dict())        # NumPy only
    agg.load_state_dict(fastfair.load_state("rule.npz"))     # exact
"""

from __future__ import annotations

import copy
import io
import json
import os
import sys
import zipfile
import zlib
from collections import OrderedDict
from typing import Any, Dict, List, Tuple, Union

import numpy as np

from fastfair._files import atomic
from fastfair._limits import npz_array_header

PathLike = Union[str, "os.PathLike[str]"]

#: The key of the JSON skeleton inside a :func:`save_state` file; arrays are ``a0``, ``a1``, ...
SKELETON = "__fastfair_state__"
_ARRAY = "__array__"


def _pickled_by_torch_save() -> bool:
    """Whether the pickler now calling a ``__reduce_ex__`` is ``torch.save``'s.

    The C pickler calls ``__reduce_ex__`` with no Python frame of its own in between, so the
    caller's frame (two up from here) is the one that called ``Pickler.dump``: for
    ``torch.save``, a function of ``torch.serialization``; for ``pickle.dumps``, ``copy``,
    ``multiprocessing`` (at any protocol), the user's code or the standard library."""
    frame = sys._getframe(2)
    return frame.f_globals.get("__name__") == "torch.serialization"


class StateDict(dict):
    """A ``dict`` (what every ``state_dict()`` returns) whose pickled form suits ``torch.save``:
    pickled by ``torch.save`` its NumPy arrays travel as torch tensors (copies) inside plain
    dicts and an ``OrderedDict``, the types torch's weights-only loader accepts, so
    ``torch.load(path)`` with torch's defaults reads it. The loaded value is an ``OrderedDict``
    with tensors where the arrays were; every ``load_state_dict`` of fastfair takes it as it
    takes the original. Every other pickling (``pickle.dumps`` at any protocol,
    ``multiprocessing``) and copies keep the NumPy arrays: unpickled, it is a plain ``dict``
    equal to the original."""

    def __reduce_ex__(self, protocol: Any) -> Tuple[Any, ...]:
        torch = sys.modules.get("torch")
        if torch is not None and _pickled_by_torch_save():
            return (OrderedDict, ([(k, _as_torch(v, torch)) for k, v in self.items()],))
        return (dict, (dict(self),))

    def __copy__(self) -> "StateDict":
        return StateDict(self)

    def __deepcopy__(self, memo: Dict[int, Any]) -> "StateDict":
        return StateDict({k: copy.deepcopy(v, memo) for k, v in self.items()})


def _as_torch(value: Any, torch: Any) -> Any:
    """``value`` with every NumPy array (and NumPy scalar) made a torch tensor (a plain Python
    number), recursively through dicts, lists and tuples."""
    if isinstance(value, np.ndarray):
        return torch.from_numpy(np.array(value, copy=True, order="C"))
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, dict):
        return {k: _as_torch(v, torch) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_as_torch(v, torch) for v in value)
    return value


def save_state(path: PathLike, state: Dict[str, Any]) -> None:
    """Writes a ``state_dict`` with NumPy alone into the ``.npz`` file ``path``: its arrays
    (NumPy, or any DLPack tensor on the CPU) as entries ``a0``, ``a1``, ..., everything else
    (dicts, lists, strings, numbers, None) as one JSON skeleton. :func:`load_state` reads it
    back exactly (arrays keep dtype and shape; tuples come back as lists, which every
    ``load_state_dict`` takes). Written atomically (:func:`fastfair._files.atomic`), so an
    interrupted save leaves an earlier file whole and a full disk raises
    :class:`~fastfair._files.FileWriteError` naming ``path``.

    Raises
    ------
    TypeError
        A value that is neither an array, a number, a string, None, nor a dict (string keys),
        list or tuple of those; it names the value's place in the state.
    """
    arrays: List[np.ndarray] = []
    skeleton = _skeleton(state, arrays, "state")
    payload: Dict[str, Any] = {f"a{i}": a for i, a in enumerate(arrays)}
    payload[SKELETON] = np.frombuffer(json.dumps(skeleton, allow_nan=True).encode(), np.uint8)
    with atomic(path) as f:
        np.savez(f, **payload)


def _skeleton(value: Any, arrays: List[np.ndarray], where: str) -> Any:
    if isinstance(value, np.generic):
        return value.item()
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, dict):
        if not all(isinstance(k, str) for k in value):
            raise TypeError(f"{where} has a key that is not a string; save_state writes JSON "
                            "keys")
        return {k: _skeleton(v, arrays, f"{where}[{k!r}]") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_skeleton(v, arrays, f"{where}[{i}]") for i, v in enumerate(value)]
    if isinstance(value, np.ndarray) or hasattr(value, "__dlpack__"):
        array = np.array(np.from_dlpack(value) if not isinstance(value, np.ndarray) else value,
                         copy=True)
        if array.dtype.kind not in "biuf":
            raise TypeError(f"{where} is an array of dtype {array.dtype}; save_state writes "
                            "booleans, integers and floats")
        arrays.append(array)
        return {_ARRAY: len(arrays) - 1}
    raise TypeError(f"{where} is a {type(value).__name__}; save_state writes arrays, numbers, "
                    "strings, None, and dicts and lists of them")


def load_state(path: PathLike) -> Dict[str, Any]:
    """The ``state_dict`` :func:`save_state` wrote into ``path``, with NumPy arrays; reads no
    pickle (``allow_pickle=False``), so loading cannot run code.

    Every array's header is checked against the bytes the file holds before the array is
    read (:func:`fastfair._limits.npz_array_header`), so a small file declaring terabytes is
    refused without allocating them.

    Raises
    ------
    ValueError
        ``path`` is not a file :func:`save_state` wrote (naming it and what is wrong): missing
        or unreadable, not a zip archive (e.g. a plain ``.npy``), a damaged archive, sizes that
        cannot be true of the file, or a skeleton nested too deeply.
    """
    name = os.fspath(path)
    try:
        with open(name, "rb") as f:
            data = f.read()
        if not zipfile.is_zipfile(io.BytesIO(data)):
            raise ValueError("it is not a zip archive (.npz); a plain .npy array holds no state")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            if SKELETON not in npz.files:
                raise ValueError("it has no state skeleton")
            for key in npz.files:
                npz_array_header(npz.zip, key, name, len(data))
            skeleton = json.loads(npz[SKELETON].tobytes().decode())
            arrays = {k: npz[k] for k in npz.files if k != SKELETON}
        return _filled(skeleton, arrays, name)
    except RecursionError:
        raise ValueError(f"{name} is not a state file written by fastfair.save_state (its "
                         "skeleton is nested too deeply)") from None
    except (OSError, ValueError, KeyError, EOFError, TypeError, zipfile.BadZipFile, zlib.error,
            MemoryError, NotImplementedError) as exc:
        text = str(exc)
        if text.startswith(name):
            text = text[len(name):].lstrip(": ")
        raise ValueError(f"{name} is not a state file written by fastfair.save_state "
                         f"({type(exc).__name__}: {text})") from None


def _filled(value: Any, arrays: Dict[str, np.ndarray], name: str) -> Any:
    if isinstance(value, dict):
        if set(value) == {_ARRAY}:
            key = f"a{value[_ARRAY]}"
            if key not in arrays:
                raise ValueError(f"{name} names array {key}, which it does not hold")
            return arrays[key]
        return {k: _filled(v, arrays, name) for k, v in value.items()}
    if isinstance(value, list):
        return [_filled(v, arrays, name) for v in value]
    return value
