r"""Server optimisers, apart from the rules: SGD (the default), FedAvgM, FedAdam, FedYogi,
FedAdagrad.

A rule chooses the coefficients c of a round; an optimiser turns the combined pseudo-gradient
:math:`g = \sum_i c_i X_i` (with :math:`X_i = w - w_i`) into the server step, so any rule
combines with any optimiser. With :math:`\Delta = -g`:

.. math::
   \text{SGD: } & w \leftarrow w + \eta \Delta \\
   \text{FedAvgM: } & m \leftarrow \beta m + \Delta, \quad w \leftarrow w + \eta m \\
   \text{FedAdagrad: } & v \leftarrow v + \Delta^2 \\
   \text{FedYogi: } & v \leftarrow v - (1-\beta_2)\Delta^2 \operatorname{sign}(v - \Delta^2) \\
   \text{FedAdam: } & v \leftarrow \beta_2 v + (1-\beta_2)\Delta^2 \\
   \text{(adaptive) } & m \leftarrow \beta_1 m + (1-\beta_1)\Delta, \quad
   w \leftarrow w + \eta\, \frac{m}{\sqrt{v} + \tau}

with :math:`m_0 = 0` and :math:`v_0 = \tau^2` (adaptive federated optimisation, no bias
correction). The moment buffers live in the framework, device and dtype of the parameters.
:data:`SERVER_OPTIMIZERS` lists them by name and :func:`build_server_optimizer` builds one.
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Optional, Tuple, cast

import numpy as np

from fastfair._arrays import framework_or_none, from_host, is_floating
from fastfair.aggregators._checks import check_count, check_scalar
from fastfair.aggregators.base import FORMAT_VERSION
from fastfair.aggregators.names import SERVER_OPTIMIZERS as SERVER_OPTIMIZERS  # re-exported
from fastfair.state import StateDict


def _clone(x: Any) -> Any:
    return x.clone() if framework_or_none(x) == "torch" else x.copy()


def _like(buf: Any, param: Any) -> Any:
    """``buf`` in the framework, on the device and of the dtype of ``param`` (itself when it is
    already): a state saved from one framework steps parameters of another."""
    kind = framework_or_none(param)
    if framework_or_none(buf) == kind and getattr(buf, "device", None) == getattr(
            param, "device", None) and buf.dtype == param.dtype:
        return buf
    if framework_or_none(buf) == "torch":
        host = buf.detach().cpu().numpy()
    elif framework_or_none(buf) == "cupy":
        host = buf.get()
    else:
        host = np.asarray(buf)
    like = from_host(np.array(host, copy=True), param)
    return like.to(param.dtype) if kind == "torch" else like.astype(param.dtype)


def _sign(x: Any) -> Any:
    kind = framework_or_none(x)
    if kind == "torch":
        return x.sign()
    if kind == "cupy":
        import cupy

        return cupy.sign(x)
    return np.sign(x)


class ServerOptimizer:
    r"""A server step on the combined pseudo-gradient :math:`g = \sum_i c_i X_i` of a round.

    ``step(params, pseudo_gradient)`` updates ``params`` (one array or a list of arrays of any
    framework) in place and returns them; ``pseudo_gradient`` has the same structure and shapes.
    Moment buffers are created at the first step in the framework, device and dtype of the
    parameters. ``state_dict()`` / ``load_state_dict()`` round-trip them exactly (versioned).
    """

    #: The optimiser's public name (``--server-optimizer``).
    name: ClassVar[str] = ""
    _buffers: ClassVar[Tuple[str, ...]] = ()
    #: Buffers that are never negative (second moments), as a loaded state must be.
    _nonnegative: ClassVar[Tuple[str, ...]] = ()

    def __init__(self, *, lr: float) -> None:
        self.lr = check_scalar(lr, "lr", lo=0.0, lo_open=True)
        self.state: Dict[str, Optional[List[Any]]] = {name: None for name in self._buffers}
        self.steps = 0

    @property
    def is_plain_step(self) -> bool:
        r"""Whether a step is exactly :math:`w \leftarrow w - \eta g` with no state.

        A caller that forms :math:`g = \sum_i c_i X_i` itself may then fuse the step into that
        pass (:math:`w' = (1 - \eta \sum_i c_i) w + \sum_i \eta c_i w_i`, with
        :math:`\eta` = ``lr``) instead of calling :meth:`step`, and count it with
        ``steps += 1``.

        Returns
        -------
        bool
            True for :class:`SGD` itself (a subclass that overrides its step is not plain);
            False for every optimiser with moment buffers.
        """
        return False

    def step(self, params: Any, pseudo_gradient: Any) -> Any:
        """One step: ``params`` move against ``pseudo_gradient`` (see the class formula)."""
        ps = list(params) if isinstance(params, (list, tuple)) else [params]
        gs = (list(pseudo_gradient) if isinstance(pseudo_gradient, (list, tuple))
              else [pseudo_gradient])
        if len(gs) != len(ps) or any(tuple(g.shape) != tuple(p.shape) for g, p in zip(gs, ps)):
            raise ValueError("pseudo_gradient must have the structure and shapes of params; got "
                             f"{[tuple(g.shape) for g in gs]} for {[tuple(p.shape) for p in ps]}")
        for name, bufs in self.state.items():
            if bufs is not None and (len(bufs) != len(ps) or any(
                    tuple(b.shape) != tuple(p.shape) for b, p in zip(bufs, ps))):
                raise ValueError(f"params do not match the shapes of the {name} buffers from "
                                 "earlier steps")
        if self.state and next(iter(self.state.values())) is None:
            self._init_buffers(ps)
        else:  # buffers of a loaded state may be in another framework (torch.load gives tensors)
            # The buffers are all None or all lists (load_state_dict checks): here all lists.
            self.state = {name: [_like(b, p) for b, p in zip(cast(List[Any], bufs), ps)]
                          for name, bufs in self.state.items()}
        for k, (p, g) in enumerate(zip(ps, gs)):
            self._step(k, p, -g)
        self.steps += 1
        return params

    def _init_buffers(self, params: List[Any]) -> None:
        for name in self.state:
            bufs = []
            for p in params:
                b = _clone(p)
                b[...] = self._initial(name)
                bufs.append(b)
            self.state[name] = bufs

    def _initial(self, name: str) -> float:
        return 0.0

    def _step(self, k: int, param: Any, delta: Any) -> None:
        """Moves parameter array k by the negative pseudo-gradient ``delta``."""
        raise NotImplementedError

    def _config(self) -> Dict[str, Any]:
        return {"lr": self.lr}

    def state_dict(self) -> Dict[str, Any]:
        """``{"format_version", "optimizer", "config", "state"}``; buffers copied, in their own
        framework; a :class:`~fastfair.state.StateDict` (``torch.save``/``torch.load`` with
        torch's defaults, or :func:`fastfair.save_state`)."""
        return StateDict(format_version=FORMAT_VERSION, optimizer=self.name,
                         config=dict(self._config()),
                         state={"steps": self.steps,
                                **{name: None if bufs is None else [_clone(b) for b in bufs]
                                   for name, bufs in self.state.items()}})

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict` exactly. The step counter and every buffer are checked
        first (a non-negative integer; None or lists of finite floating-point arrays, the
        second moment non-negative, all buffers of the same shapes); on any mismatch it raises
        and changes nothing."""
        if not isinstance(state_dict, dict):
            raise TypeError("state_dict must be a dict returned by state_dict()")
        # Version 3 changed only the rules' per-client vectors: a version 2 optimiser is the same.
        if state_dict.get("format_version") not in (2, FORMAT_VERSION):
            raise ValueError(f"state_dict has format_version {state_dict.get('format_version')!r}"
                             f"; this fastfair reads versions 2 and {FORMAT_VERSION}")
        if state_dict.get("optimizer") != self.name:
            raise ValueError(f"state_dict is for optimizer {state_dict.get('optimizer')!r}, not "
                             f"{self.name!r}")
        if state_dict.get("config") != self._config():
            raise ValueError(f"state_dict config {state_dict.get('config')!r} differs from this "
                             f"optimizer's {self._config()!r}; construct it with the same "
                             "hyperparameters")
        state = state_dict.get("state")
        if not isinstance(state, dict):
            raise TypeError("state_dict['state'] must be a dict returned by state_dict()")
        expected = {"steps", *self.state}
        if set(state) != expected:
            raise ValueError(f"state_dict state has keys {sorted(state)}; expected "
                             f"{sorted(expected)}")
        steps = check_count(state["steps"], "state['steps']")
        bufs = {name: self._check_buffer(state[name], name) for name in self.state}
        shapes = {name: None if v is None else tuple(tuple(b.shape) for b in v)
                  for name, v in bufs.items()}
        if len(set(shapes.values())) > 1:
            raise ValueError("state buffers must be all None (before the first step) or lists "
                             f"of arrays of the same shapes; got shapes {shapes}")
        # Everything is checked: nothing below can fail.
        self.steps = steps
        self.state = bufs

    def _check_buffer(self, value: Any, buffer: str) -> Optional[List[Any]]:
        """Loaded buffer ``buffer``: None, or a list of finite floating-point arrays
        (non-negative for a second moment), returned as copies."""
        name = f"state[{buffer!r}]"
        if value is None:
            return None
        if not isinstance(value, (list, tuple)):
            raise TypeError(f"{name} must be None or a list of arrays; got "
                            f"{type(value).__name__}")
        out = []
        for k, b in enumerate(value):
            if framework_or_none(b) is None or not is_floating(b):
                raise TypeError(f"{name}[{k}] must be a floating-point array (NumPy, torch or "
                                f"CuPy); got {type(b).__name__}")
            if not bool((abs(b) < float("inf")).all()):
                raise ValueError(f"{name}[{k}] must be finite")
            if buffer in self._nonnegative and not bool((b >= 0).all()):
                raise ValueError(f"{name}[{k}] must be non-negative (a second moment)")
            out.append(_clone(b))
        return out

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"{type(self).__name__}({args})"


class SGD(ServerOptimizer):
    r"""Plain server step :math:`w \leftarrow w - \eta g` (``lr`` = 1 is the rule's own
    average); the default of every simulation and strategy."""

    name = "sgd"

    def __init__(self, *, lr: float = 1.0) -> None:
        super().__init__(lr=lr)

    @property
    def is_plain_step(self) -> bool:
        """True unless a subclass changes the step (see :attr:`ServerOptimizer.is_plain_step`)."""
        cls = type(self)
        return cls.step is ServerOptimizer.step and cls._step is SGD._step

    def _step(self, k: int, param: Any, delta: Any) -> None:
        param += self.lr * delta


class FedAvgM(ServerOptimizer):
    r"""Server momentum: :math:`m \leftarrow \beta m + \Delta`, :math:`w \leftarrow w + \eta m`.

    ``FedAvgM(lr=1.0, momentum=0.9)``; ``momentum=0`` is :class:`SGD`.
    """

    name = "fedavgm"
    _buffers = ("momentum_buffer",)

    def __init__(self, *, lr: float = 1.0, momentum: float = 0.9) -> None:
        super().__init__(lr=lr)
        self.momentum = check_scalar(momentum, "momentum", lo=0.0, hi=1.0, hi_open=True)

    def _config(self) -> Dict[str, Any]:
        return {"lr": self.lr, "momentum": self.momentum}

    def _step(self, k: int, param: Any, delta: Any) -> None:
        bufs = self.state["momentum_buffer"]
        assert bufs is not None  # step() created the buffers before its first _step
        buf = bufs[k]
        buf *= self.momentum
        buf += delta
        param += self.lr * buf


class _Adaptive(ServerOptimizer):
    _buffers = ("exp_avg", "exp_avg_sq")
    _nonnegative = ("exp_avg_sq",)

    def __init__(self, *, lr: float = 1e-2, beta1: float = 0.9, beta2: float = 0.99,
                 tau: float = 1e-3) -> None:
        super().__init__(lr=lr)
        self.beta1 = check_scalar(beta1, "beta1", lo=0.0, hi=1.0, hi_open=True)
        self.beta2 = check_scalar(beta2, "beta2", lo=0.0, hi=1.0, hi_open=True)
        self.tau = check_scalar(tau, "tau", lo=0.0, lo_open=True)

    def _config(self) -> Dict[str, Any]:
        return {"lr": self.lr, "beta1": self.beta1, "beta2": self.beta2, "tau": self.tau}

    def _initial(self, name: str) -> float:
        return self.tau ** 2 if name == "exp_avg_sq" else 0.0

    def _second_moment(self, v: Any, sq: Any) -> None:
        raise NotImplementedError

    def _step(self, k: int, param: Any, delta: Any) -> None:
        avg, avg_sq = self.state["exp_avg"], self.state["exp_avg_sq"]
        assert avg is not None and avg_sq is not None  # step() created them before its first _step
        m, v = avg[k], avg_sq[k]
        m *= self.beta1
        m += (1.0 - self.beta1) * delta
        self._second_moment(v, delta * delta)
        param += self.lr * m / (v ** 0.5 + self.tau)


class FedAdam(_Adaptive):
    r"""FedAdam: :math:`v \leftarrow \beta_2 v + (1-\beta_2)\Delta^2`.

    ``FedAdam(lr=1e-2, beta1=0.9, beta2=0.99, tau=1e-3)``.
    """

    name = "fedadam"

    def _second_moment(self, v: Any, sq: Any) -> None:
        v *= self.beta2
        v += (1.0 - self.beta2) * sq


class FedYogi(_Adaptive):
    r"""FedYogi: :math:`v \leftarrow v - (1-\beta_2)\Delta^2\operatorname{sign}(v - \Delta^2)`.

    ``FedYogi(lr=1e-2, beta1=0.9, beta2=0.99, tau=1e-3)``.
    """

    name = "fedyogi"

    def _second_moment(self, v: Any, sq: Any) -> None:
        v -= (1.0 - self.beta2) * sq * _sign(v - sq)


class FedAdagrad(_Adaptive):
    r"""FedAdagrad: :math:`v \leftarrow v + \Delta^2` (``beta2`` unused).

    ``FedAdagrad(lr=1e-2, beta1=0.9, tau=1e-3)``.
    """

    name = "fedadagrad"

    def __init__(self, *, lr: float = 1e-2, beta1: float = 0.9, tau: float = 1e-3) -> None:
        super().__init__(lr=lr, beta1=beta1, beta2=0.0, tau=tau)

    def _config(self) -> Dict[str, Any]:
        return {"lr": self.lr, "beta1": self.beta1, "tau": self.tau}

    def _second_moment(self, v: Any, sq: Any) -> None:
        v += sq

