"""Weighted parameter averaging: the aggregation step of every federated rule."""

from __future__ import annotations

import threading
from typing import (
    TYPE_CHECKING,
    Any,
    Dict,
    List,
    Mapping,
    Optional,
    Sequence,
    Union,
    overload,
)

import numpy as np

from fastfair import _C
from fastfair._arrays import (
    FLOAT_DTYPES,
    check_finite,
    current_stream,
    detach,
    dtype_name,
    empty,
    float64_like,
    framework,
    is_cuda,
    real,
    zeros,
)

if TYPE_CHECKING:
    import torch

Array = Any
Updates = Union[Array, Sequence[Sequence[Array]]]
#: A model's named arrays: a PyTorch ``state_dict`` (or any mapping of names to arrays).
StateDict = Mapping[str, Any]

_ACCUMULATOR_DTYPE = {"float32": "float32", "float16": "float32", "bfloat16": "float32",
                      "float64": "float64"}


def _is_list_form(X: Any) -> bool:
    return isinstance(X, (list, tuple))


def _weights(w: Any, like: Array, n: int, name: str = "w") -> Array:
    weights = float64_like(w, like, name, vector=True)
    if weights.shape[0] != n:
        raise ValueError(f"{name} has {weights.shape[0]} entries but there are {n} client updates")
    if not is_cuda(weights):
        check_finite(weights, name)
    return weights


def _state_of(x: Any) -> Optional[StateDict]:
    """``x`` as a mapping of names to arrays: a mapping itself, an ``nn.Module``'s
    ``state_dict()`` (its tensors share memory with the module), else None."""
    if isinstance(x, Mapping):
        return x
    state_dict = getattr(x, "state_dict", None)
    if callable(state_dict) and type(x).__module__.split(".")[0] != "numpy":
        return state_dict()
    return None


def _is_float(a: Any) -> bool:
    return dtype_name(a) in FLOAT_DTYPES


def _states_average(X: Sequence[Any], w: Any, out: Any, base: Any, lr: float,
                    stream: Optional[int]) -> Any:
    """:func:`weighted_average` of state dicts (or modules) ``X``: one list-form pass per float
    dtype, integer and boolean entries copied from ``X[0]`` (or left as they are in ``base``)."""
    states = [_state_of(x) for x in X]
    for i, state in enumerate(states):
        if state is None:
            raise TypeError(f"X[{i}] is a {type(X[i]).__name__}, but X[0] is a state dict: pass "
                            "one state dict (or nn.Module) per client")
    first = states[0]
    assert first is not None  # every entry was checked just above
    names = list(first)
    if not names:
        raise ValueError("X[0] is an empty state dict: pass states with at least one array")
    for i, state in enumerate(states):
        assert state is not None
        if list(state) != names:
            missing = sorted(set(names) - set(state)) or sorted(set(state) - set(names))
            raise ValueError(f"X[{i}] has other keys than X[0] (first differing: "
                             f"{missing[0] if missing else 'their order'}); every state dict must "
                             "come from the same model")
    target = base if base is not None else out
    target_state = None if target is None else _state_of(target)
    if target is not None and (target_state is None or list(target_state) != names):
        raise ValueError(f"{'base' if base is not None else 'out'} must be a state dict (or "
                         "nn.Module) with the same keys as X[0]")
    by_dtype: Dict[str, List[str]] = {}
    for name in names:
        if _is_float(first[name]):
            by_dtype.setdefault(dtype_name(first[name]), []).append(name)
    if not by_dtype:
        raise ValueError("X[0] holds no floating-point entry to average")
    result: Dict[str, Any] = {}
    for group in by_dtype.values():
        rows = [[state[name] for name in group] for state in states if state is not None]
        into = None if target_state is None else [target_state[name] for name in group]
        averaged = weighted_average(rows, w, out=into if base is None else None,
                                    base=into if base is not None else None, lr=lr,
                                    stream=stream)
        result.update(zip(group, averaged))
    for name in names:
        if name in result:
            continue
        if target_state is not None and base is not None:
            result[name] = target_state[name]   # the server step leaves counters as they are
        else:
            copied = first[name].clone() if hasattr(first[name], "clone") else first[name].copy()
            if target_state is not None:
                target_state[name][...] = copied
                copied = target_state[name]
            result[name] = copied
    return target if target is not None else {name: result[name] for name in names}


@overload
def weighted_average(X: "torch.Tensor", w: Any, *, out: Optional["torch.Tensor"] = None,
                     base: Optional["torch.Tensor"] = None, lr: float = 1.0,
                     stream: Optional[int] = None) -> "torch.Tensor": ...


@overload
def weighted_average(X: np.ndarray, w: Any, *, out: Optional[np.ndarray] = None,
                     base: Optional[np.ndarray] = None, lr: float = 1.0,
                     stream: Optional[int] = None) -> np.ndarray: ...


@overload
def weighted_average(X: Sequence[StateDict], w: Any, *, out: Optional[StateDict] = None,
                     base: Optional[StateDict] = None, lr: float = 1.0,
                     stream: Optional[int] = None) -> Dict[str, Any]: ...


@overload
def weighted_average(X: Sequence[Sequence[Array]], w: Any, *, out: Optional[Updates] = None,
                     base: Optional[Updates] = None, lr: float = 1.0,
                     stream: Optional[int] = None) -> List[Array]: ...


@overload
def weighted_average(X: Any, w: Any, *, out: Any = None, base: Any = None, lr: float = 1.0,
                     stream: Optional[int] = None) -> Any: ...


def weighted_average(X: Any, w: Any, *, out: Any = None, base: Any = None, lr: float = 1.0,
                     stream: Optional[int] = None) -> Any:
    r"""Weighted sum of client updates, in one memory-bound pass.

    .. math:: \mathrm{out} = \sum_{i=1}^{N} w_i X_i
       \qquad\text{or, with ``base``:}\qquad
       \mathrm{base} \leftarrow \mathrm{base} - \mathrm{lr} \sum_{i=1}^{N} w_i X_i

    Parameters
    ----------
    X
        Flat form: one array of shape ``[N, *S]`` (client updates as rows; the client axis may be
        strided, each row must be contiguous). List form: a sequence of N client updates, each a
        sequence of L arrays of any shapes (a model's parameters), the same shapes and one float
        dtype for every client; all L outputs come from one multi-tensor pass. State-dict form:
        a sequence of N ``state_dict`` s (mappings of names to arrays, same keys in the same
        order) or ``nn.Module`` s; the floating-point entries are averaged (one pass per float
        dtype) and the result is a dict with every key in ``X[0]``'s order. Integer and boolean
        entries (BatchNorm's ``num_batches_tracked``) are counters, not parameters: they are
        copied from ``X[0]``, and with ``base`` left as they are in ``base``.
    w
        Weights ``[N]``, any real sequence or array. They are used as given (no normalisation):
        mixing coefficients that sum to one give an average. Negative weights are allowed (the
        result is a linear combination); NaN or infinite weights raise ``ValueError`` for CPU
        inputs. CUDA weights are not inspected, since that would synchronise the stream.
    out
        Optional preallocated result: ``[*S]`` (flat) or a list of L arrays, same dtype and device
        as ``X``, contiguous and writable, sharing no memory with ``X``, ``w`` or each other.
    base
        Server-step form: parameters (``[*S]`` or a list of L arrays) updated in place to
        ``base - lr * sum_i w_i X_i``, where ``X_i`` are pseudo-gradients ``global - local_i``
        (so ``base`` shares no memory with ``X`` or ``w``). Returns ``base``. Excludes ``out``.
    lr
        Server learning rate of the server-step form (finite).
    stream
        CUDA stream handle for CUDA inputs; default the current stream of their framework.

    Returns
    -------
    The weighted sum, shape ``[*S]`` (or a list of L arrays, or a state dict), in the framework,
    device and dtype of ``X``; ``base`` or ``out`` itself when given (a module given as ``base``:
    the module, its parameters updated in place). float32/float16/bfloat16 accumulate in float32,
    float64 in float64; the summation order depends only on the shapes, so results do not change
    with the number of threads.
    """
    if out is not None and base is not None:
        raise ValueError("pass either out= (a fresh sum) or base= (a server step), not both")
    mode = "server_step" if base is not None else "write"
    target = base if base is not None else out
    target_name = "base" if base is not None else "out"
    lr = real(lr, "lr")

    if _is_list_form(X) and X and _state_of(X[0]) is not None:
        return _states_average(X, w, out, base, lr, stream)
    if _is_list_form(X):
        # Per-array work stays in C++ (which also reads grad-tracking tensors detached): a model
        # state of hundreds of arrays times hundreds of clients must not loop in Python.
        if X and not _is_list_form(X[0]):
            raise ValueError("X is a list of arrays, but the list form takes one list of "
                             "arrays per client: pass [[u_1], [u_2], ...], or stack the updates "
                             "into one [N, ...] array")
        if not X or not X[0]:
            raise ValueError("X is empty: pass at least one client update with at least one array")
        first = X[0][0]
        weights = _weights(w, first, len(X))
        if target is None:
            target = [empty(a, a.shape, dtype_name(a)) for a in X[0]]
        _C.weighted_average_lists(X, weights, target, mode, lr, current_stream(first, stream),
                                  ("X", "w", target_name, True, True))
        return list(target)

    X = detach(X)
    framework(X)  # raises TypeError naming the type for non-arrays
    if len(X.shape) < 1:
        raise ValueError("X must have a client axis: shape [N, *S]")
    weights = _weights(w, X, X.shape[0])
    if target is None:
        target = empty(X, X.shape[1:], dtype_name(X))
    _C.weighted_average_rows(X, weights, detach(target), mode, lr, current_stream(X, stream),
                             ("X", "w", target_name, True, True))
    return target


class Accumulator:
    r"""Streaming weighted average with memory O(D), whatever the number of clients.

    ``add(update, weight)`` folds one client update into a running sum held in float32 (float64 for
    float64 updates); ``result()`` returns

    .. math:: \frac{\sum_i w_i u_i}{\sum_i w_i}

    (or the plain sum with ``normalize=False``) in the updates' dtype and framework. An update is
    one array of shape ``[*S]`` or a list of L arrays; the first ``add`` fixes the structure.
    ``add_rows(X, w)`` folds N updates stacked as ``[N, *S]`` at once. Summation order is the order
    of the calls, so a replay of the same calls reproduces the result bit for bit.

    Thread safety: ``add``, ``add_rows``, ``result`` and ``reset`` may be called from several
    threads at once; a lock makes each call whole (no update is lost or half-added, and
    ``count``/``total_weight`` always match the sum). Concurrent adds are folded in the order the
    lock admits them, so float results of such runs may differ in the last bits from one run to
    the next. For CUDA updates the lock orders the kernel launches, not the kernels: threads that
    add on different CUDA streams must order those streams themselves (or use one stream).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._sums: Optional[List[Array]] = None
        self._flat: Optional[Array] = None
        self._shapes: List[tuple] = []
        self._dtype = ""
        self._list_form = False
        self._total_weight = 0.0
        self._count = 0

    @property
    def total_weight(self) -> float:
        """Sum of the weights added so far."""
        return self._total_weight

    @property
    def count(self) -> int:
        """Number of client updates added so far."""
        return self._count

    def _buffers(self, like: Array, shapes: List[tuple], list_form: bool,
                 name: str) -> Optional[dict]:
        """The running sum for updates of these shapes and ``like``'s dtype and device, as the
        attributes to adopt once the first add has succeeded (None when they exist already, after
        checking that the update matches them). Nothing changes here: a failed first add leaves
        the accumulator empty."""
        if self._sums is not None:
            if list_form != self._list_form or shapes != self._shapes:
                raise ValueError(f"{name} does not match the structure of the first update "
                                 f"(shapes {self._shapes}); got shapes {shapes}")
            return None
        dtype = dtype_name(like)
        if dtype not in _ACCUMULATOR_DTYPE:
            raise ValueError(f"{name} must be float32, float64, float16 or bfloat16; got {dtype}")
        sizes = [int(np.prod(s, dtype=np.int64)) for s in shapes]
        # One flat buffer; each segment is a view into it.
        flat = zeros(like, [sum(sizes)], _ACCUMULATOR_DTYPE[dtype])
        offsets = np.cumsum([0] + sizes)
        sums = [flat[int(offsets[k]):int(offsets[k + 1])] for k in range(len(sizes))]
        return {"_flat": flat, "_sums": sums, "_shapes": shapes, "_dtype": dtype,
                "_list_form": list_form}

    def add(self, update: Updates, weight: float = 1.0) -> None:
        """Adds ``weight * update``; ``update`` is ``[*S]`` or a list of L arrays. A call that
        raises leaves the accumulator as it was. Safe to call from several threads at once."""
        weight = real(weight, "weight")
        list_form = _is_list_form(update)
        arrays = [detach(a) for a in update] if list_form else [detach(update)]
        if not arrays:
            raise ValueError("update is empty: pass at least one array")
        for a in arrays:
            framework(a)  # TypeError naming the type for non-arrays
        weights = _weights([weight], arrays[0], 1, "weight")
        with self._lock:
            fresh = self._buffers(arrays[0], [tuple(a.shape) for a in arrays], list_form, "update")
            sums = fresh["_sums"] if fresh else self._sums
            _C.weighted_average_lists([arrays], weights, sums, "accumulate", 1.0,
                                      current_stream(arrays[0], None),
                                      ("update", "weight", "the running sum", False, list_form))
            if fresh:
                self.__dict__.update(fresh)
            self._total_weight += weight
            self._count += 1

    def add_rows(self, X: Array, w: Any) -> None:
        """Adds ``sum_i w[i] * X[i]`` for N updates stacked as ``X`` of shape ``[N, *S]``. A call
        that raises leaves the accumulator as it was. Safe to call from several threads at once."""
        X = detach(X)
        framework(X)
        if len(X.shape) < 1:
            raise ValueError("X must have a client axis: shape [N, *S]")
        weights = _weights(w, X, X.shape[0])
        # The running total lives on the host; for weights already on a GPU, reading it back
        # waits for them (the kernel itself is not waited for).
        added = float(weights.sum())
        with self._lock:
            fresh = self._buffers(X, [tuple(X.shape[1:])], False, "rows of X")
            flat = fresh["_flat"] if fresh else self._flat
            _C.weighted_average_rows(X, weights, flat, "accumulate", 1.0, current_stream(X, None),
                                     ("X", "w", "the running sum", True, True))
            if fresh:
                self.__dict__.update(fresh)
            self._total_weight += added
            self._count += int(X.shape[0])

    def result(self, *, normalize: bool = True) -> Updates:
        """The weighted mean (or, with ``normalize=False``, the weighted sum) of all updates, in
        the updates' dtype, framework and shapes."""
        with self._lock:
            if self._sums is None:
                raise ValueError("no update has been added yet")
            scale = 1.0
            if normalize:
                if self._total_weight == 0.0:
                    raise ValueError("the total weight is zero; the weighted mean is undefined "
                                     "(use result(normalize=False) for the sum)")
                scale = 1.0 / self._total_weight
            outs = [_cast(s * scale, self._dtype).reshape(shape)
                    for s, shape in zip(self._sums, self._shapes)]
        return outs if self._list_form else outs[0]

    def reset(self) -> None:
        """Zeroes the running sum, keeping the buffers for the next round."""
        with self._lock:
            if self._flat is not None:
                self._flat[...] = 0
            self._total_weight = 0.0
            self._count = 0


def _cast(a: Array, dtype: str) -> Array:
    if framework(a) == "torch":
        import torch

        return a.to(getattr(torch, dtype))
    return a.astype(dtype)
