r"""Server optimisers usable with any rule's coefficients: FedAvgM, FedAdam, FedYogi, FedAdagrad.

Each wraps an aggregator (FedAvg by default): ``weights`` is the wrapped rule's, and
``aggregate(updates, coef, base=params)`` turns the combined pseudo-gradient into an adaptive
server step. With :math:`X_i = w - w_i` and :math:`\Delta = -\sum_i c_i X_i`:

.. math::
   \text{FedAvgM: } & m \leftarrow \beta m + \Delta, \quad w \leftarrow w + \eta m \\
   \text{FedAdagrad: } & v \leftarrow v + \Delta^2 \\
   \text{FedYogi: } & v \leftarrow v - (1-\beta_2)\Delta^2 \operatorname{sign}(v - \Delta^2) \\
   \text{FedAdam: } & v \leftarrow \beta_2 v + (1-\beta_2)\Delta^2 \\
   \text{(adaptive) } & m \leftarrow \beta_1 m + (1-\beta_1)\Delta, \quad
   w \leftarrow w + \eta\, \frac{m}{\sqrt{v} + \tau}

with :math:`m_0 = 0` and :math:`v_0 = \tau^2` (adaptive federated optimisation, no bias
correction). The moment buffers live in the framework, device and dtype of the parameters; the
wrapped rule's state and the buffers share one ``state_dict``.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

import numpy as np

from fastfair._arrays import framework_or_none
from fastfair.aggregators.base import FORMAT_VERSION, Aggregator, check_scalar
from fastfair.aggregators.fedavg import FedAvg


def _clone(x: Any) -> Any:
    return x.clone() if framework_or_none(x) == "torch" else x.copy()


def _sign(x: Any) -> Any:
    kind = framework_or_none(x)
    if kind == "torch":
        return x.sign()
    if kind == "cupy":
        import cupy

        return cupy.sign(x)
    return np.sign(x)


class _ServerOptimizer(Aggregator):
    """Shared machinery: delegation to the wrapped rule, buffers, state_dict."""

    _buffers: tuple = ()

    def __init__(self, num_clients: int, aggregator: Optional[Aggregator] = None, *,
                 lr: float) -> None:
        super().__init__(num_clients)
        if aggregator is None:
            aggregator = FedAvg(num_clients)
        if not isinstance(aggregator, Aggregator) or isinstance(aggregator, _ServerOptimizer):
            raise TypeError("aggregator must be a fastfair aggregation rule (FedAvg, FedMABA, "
                            f"...); got {type(aggregator).__name__}")
        if aggregator.num_clients != self.num_clients:
            raise ValueError(f"aggregator has num_clients {aggregator.num_clients}; expected "
                             f"{self.num_clients}")
        self.aggregator = aggregator
        self.lr = check_scalar(lr, "lr", lo=0.0, lo_open=True)
        self.state: Dict[str, Optional[List[Any]]] = {name: None for name in self._buffers}
        self.steps = 0

    def weights(self, client_ids: Any, losses: Any = None, num_samples: Any = None,
                **round_inputs: Any) -> Any:
        """The wrapped rule's coefficients (see :meth:`Aggregator.weights`)."""
        coef = self.aggregator.weights(client_ids, losses, num_samples, **round_inputs)
        self.round += 1
        return coef

    def aggregate(self, updates: Any, coefficients: Any = None, *, base: Any = None,
                  lr: Optional[float] = None, out: Any = None) -> Any:
        r"""One server step on ``base`` (required; one array or a list of arrays, updated in
        place and returned) from pseudo-gradients ``updates`` weighted by ``coefficients`` (or an
        :class:`fastfair.ops.Accumulator` holding :math:`\sum_i c_i X_i`). The step size is the
        optimiser's ``lr``."""
        if base is None:
            raise ValueError(f"base is required: {type(self).__name__} updates the parameters "
                             "in place")
        if lr is not None or out is not None:
            raise ValueError(f"{type(self).__name__} takes its step size from lr= at "
                             "construction and has no out=")
        combined = Aggregator.aggregate(self, updates, coefficients)
        params = list(base) if isinstance(base, (list, tuple)) else [base]
        grads = list(combined) if isinstance(combined, list) else [combined]
        if len(grads) != len(params) or any(tuple(g.shape) != tuple(p.shape)
                                            for g, p in zip(grads, params)):
            raise ValueError("base must have the structure and shapes of one client update")
        for name, bufs in self.state.items():
            if bufs is not None and (len(bufs) != len(params) or any(
                    tuple(b.shape) != tuple(p.shape) for b, p in zip(bufs, params))):
                raise ValueError(f"base does not match the shapes of the {name} buffers from "
                                 "earlier rounds")
        if self.state and next(iter(self.state.values())) is None:
            self._init_buffers(params)
        for k, (p, g) in enumerate(zip(params, grads)):
            self._step(k, p, -g)
        self.steps += 1
        return base

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
        raise NotImplementedError

    def _config(self) -> Dict[str, Any]:
        return {"lr": self.lr}

    def state_dict(self) -> Dict[str, Any]:
        """Versioned snapshot of the optimiser (buffers copied, in their own framework) and of
        the wrapped rule (``"aggregator"``)."""
        return {"format_version": FORMAT_VERSION, "rule": type(self).__name__,
                "num_clients": self.num_clients, "config": dict(self._config()),
                "state": {"round": self.round, "steps": self.steps,
                          **{name: None if bufs is None else [_clone(b) for b in bufs]
                             for name, bufs in self.state.items()}},
                "aggregator": self.aggregator.state_dict()}

    def load_state_dict(self, state_dict: Dict[str, Any]) -> None:
        """Restores :meth:`state_dict` exactly; on any mismatch raises and changes nothing."""
        if not isinstance(state_dict, dict) or "aggregator" not in state_dict:
            raise ValueError("state_dict must come from a server optimiser's state_dict()")
        outer = {k: v for k, v in state_dict.items() if k != "aggregator"}
        state = outer.get("state", {})
        bufs = {name: state.get(name) for name in self.state}
        for name, value in bufs.items():
            if value is not None and not isinstance(value, (list, tuple)):
                raise ValueError(f"state[{name!r}] must be None or a list of arrays")
        expected = {"round", "steps", *self.state}
        if set(state) != expected:
            raise ValueError(f"state_dict state has keys {sorted(state)}; expected "
                             f"{sorted(expected)}")
        self._check_header(outer)
        self.aggregator.load_state_dict(state_dict["aggregator"])
        self.round = int(state["round"])
        self.steps = int(state["steps"])
        self.state = {name: None if v is None else [_clone(b) for b in v]
                      for name, v in bufs.items()}

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self._config().items())
        return f"{type(self).__name__}({self.num_clients}, aggregator={self.aggregator!r}, {args})"


class FedAvgM(_ServerOptimizer):
    r"""Server momentum: :math:`m \leftarrow \beta m + \Delta`, :math:`w \leftarrow w + \eta m`.

    ``FedAvgM(num_clients, aggregator=None, lr=1.0, momentum=0.9)``; ``momentum=0`` and
    ``lr=1`` is plain averaging.
    """

    _buffers = ("momentum_buffer",)

    def __init__(self, num_clients: int, aggregator: Optional[Aggregator] = None, *,
                 lr: float = 1.0, momentum: float = 0.9) -> None:
        super().__init__(num_clients, aggregator, lr=lr)
        self.momentum = check_scalar(momentum, "momentum", lo=0.0, hi=1.0, hi_open=True)

    def _config(self) -> Dict[str, Any]:
        return {"lr": self.lr, "momentum": self.momentum}

    def _step(self, k: int, param: Any, delta: Any) -> None:
        buf = self.state["momentum_buffer"][k]
        buf *= self.momentum
        buf += delta
        param += self.lr * buf


class _Adaptive(_ServerOptimizer):
    _buffers = ("exp_avg", "exp_avg_sq")

    def __init__(self, num_clients: int, aggregator: Optional[Aggregator] = None, *,
                 lr: float = 1e-2, beta1: float = 0.9, beta2: float = 0.99,
                 tau: float = 1e-3) -> None:
        super().__init__(num_clients, aggregator, lr=lr)
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
        m, v = self.state["exp_avg"][k], self.state["exp_avg_sq"][k]
        m *= self.beta1
        m += (1.0 - self.beta1) * delta
        self._second_moment(v, delta * delta)
        param += self.lr * m / (v ** 0.5 + self.tau)


class FedAdam(_Adaptive):
    r"""FedAdam: :math:`v \leftarrow \beta_2 v + (1-\beta_2)\Delta^2`.

    ``FedAdam(num_clients, aggregator=None, lr=1e-2, beta1=0.9, beta2=0.99, tau=1e-3)``.
    """

    def _second_moment(self, v: Any, sq: Any) -> None:
        v *= self.beta2
        v += (1.0 - self.beta2) * sq


class FedYogi(_Adaptive):
    r"""FedYogi: :math:`v \leftarrow v - (1-\beta_2)\Delta^2\operatorname{sign}(v - \Delta^2)`.

    ``FedYogi(num_clients, aggregator=None, lr=1e-2, beta1=0.9, beta2=0.99, tau=1e-3)``.
    """

    def _second_moment(self, v: Any, sq: Any) -> None:
        v -= (1.0 - self.beta2) * sq * _sign(v - sq)


class FedAdagrad(_Adaptive):
    r"""FedAdagrad: :math:`v \leftarrow v + \Delta^2` (``beta2`` unused).

    ``FedAdagrad(num_clients, aggregator=None, lr=1e-2, beta1=0.9, tau=1e-3)``.
    """

    def __init__(self, num_clients: int, aggregator: Optional[Aggregator] = None, *,
                 lr: float = 1e-2, beta1: float = 0.9, tau: float = 1e-3) -> None:
        super().__init__(num_clients, aggregator, lr=lr, beta1=beta1, beta2=0.0, tau=tau)

    def _config(self) -> Dict[str, Any]:
        return {"lr": self.lr, "beta1": self.beta1, "tau": self.tau}

    def _second_moment(self, v: Any, sq: Any) -> None:
        v += sq
