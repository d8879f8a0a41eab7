r"""What a client minimises, for the rules that change it: one protocol for every training loop.

A rule that changes the client objective returns one from
:meth:`~fastfair.aggregators.Aggregator.client_objective` (FedProx's proximal term, PropFair's
loss transform, Fed-CVaR-Avg's jointly trained threshold); every other rule returns ``None`` and
clients minimise their plain mean loss. The same object serves the simulator, which trains a
whole cohort as ``[m]`` rows, and a Flower ``ClientApp``, which trains one client: every method
works elementwise on floats, NumPy arrays and torch tensors (autograd flows through them).

The protocol, for a minibatch whose mean loss is :math:`\ell` (a scalar, or ``[m]`` for m
clients at once):

- ``objective(mean_loss, params, global_params, state)`` is what the client minimises;
  ``params`` / ``global_params`` are one array or lists of arrays (a batched cohort passes
  ``[m, P]`` rows and the ``[P]`` received model), reduced to the shape of ``mean_loss``.
- ``initial_state()`` is the value of the trainable scalar the objective adds beside the model
  (None when it adds none); ``state_lr(lr)`` is its step size for a client learning rate ``lr``.
- ``report(state)`` turns the final scalars into the round inputs the server rule reads
  (``{"thresholds": t'}``); ``reports`` maps each such input to the metric key a Flower client
  puts it under.
- ``to_config()`` / :meth:`ClientObjective.from_config` carry the objective to a client as plain
  key/value pairs (Flower's ``ConfigRecord``).
"""

from __future__ import annotations

from typing import Any, ClassVar, Dict, List, Mapping, Optional, Tuple

import numpy as np

from fastfair.aggregators._checks import check_scalar
from fastfair.aggregators.names import OBJECTIVE_NAMES as OBJECTIVE_NAMES  # re-exported
from fastfair.aggregators.names import OBJECTIVES as OBJECTIVES  # re-exported

#: Config key naming the objective kind (``"proximal"``, ``"propfair"``, ``"cvar"``).
OBJECTIVE_KEY = "fastfair-objective"
#: Metric key under which Fed-CVaR-Avg clients report their trained threshold t'.
THRESHOLD_KEY = "fastfair-threshold"
#: Prefix of the config keys that carry an objective's options.
OPTION_PREFIX = "fastfair-"

#: One array or a sequence of arrays (any framework; arrays are untyped, hence Any).
Params = Any


def _is_torch(x: Any) -> bool:
    return type(x).__module__.split(".")[0] == "torch"


def _relu(x: Any) -> Any:
    return x.clamp(min=0) if _is_torch(x) else np.maximum(x, 0.0)


def param_pairs(params: Params, global_params: Params) -> List[Tuple[Any, Any]]:
    """``[(params_l, global_l)]`` of one array or two lists of the same length."""
    if isinstance(params, (list, tuple)):
        if not isinstance(global_params, (list, tuple)) or len(params) != len(global_params):
            raise ValueError("global_params must be a list with one array per entry of params")
        return list(zip(params, global_params))
    return [(params, global_params)]


def proximal_term(params: Params, global_params: Params, mu: float, batch_ndim: int = 0) -> Any:
    r"""FedProx's :math:`\frac{\mu}{2}\sum_l \lVert w_l - w^t_l\rVert^2`.

    ``params`` and ``global_params`` are one array or lists of L arrays (any framework; torch
    keeps its autograd graph, ``global_params`` should be detached). The squares are summed over
    every axis but the first ``batch_ndim``: 0 gives a scalar, 1 with ``params [m, P]`` and
    ``global_params [P]`` gives ``[m]`` (one term per client of a cohort).
    """
    total = 0.0
    for p, g in param_pairs(params, global_params):
        sq = (p - g) ** 2
        axes = tuple(range(batch_ndim, sq.ndim))
        total = total + (sq.sum(axes) if axes else sq)
    return 0.5 * mu * total


PROPFAIR_EXTENSIONS = ("huber", "reference_code")


def propfair_loss(loss: Any, M: float, epsilon: float, extension: str = "huber") -> Any:
    r"""PropFair's client loss :math:`-\log(1 - \ell/M)` for :math:`\ell \le \ell_0 = M -
    \epsilon`; above :math:`\ell_0` (near the pole ℓ = M) it continues as

    * ``extension="huber"``: the tangent line :math:`-\log(\epsilon/M) + (\ell - \ell_0)/
      \epsilon`, slope 1/ε, the largest the log reaches (the PropFair authors' ``--huber``,
      up to a constant; needs ε > 0);
    * ``"reference_code"``: :math:`\ell/M`, slope 1/M (the authors' code's default): the
      worst batches get the smallest gradients.

    Elementwise on a float, NumPy array or torch tensor (autograd flows through it); the result
    has the type and shape of ``loss``."""
    if _is_torch(loss):
        import torch

        near = (M - loss.detach()) < epsilon
        safe = torch.where(near, torch.zeros_like(loss), loss)  # keeps log's gradient finite
        beyond = (loss / M if extension == "reference_code"
                  else (loss - (M - epsilon)) / epsilon - float(np.log(epsilon / M)))
        return torch.where(near, beyond, -(1.0 - safe / M).log())
    value = np.asarray(loss, dtype=np.float64)
    near = (M - value) < epsilon
    with np.errstate(divide="ignore"):  # log(eps/M) is only taken with eps > 0 (huber)
        beyond = (value / M if extension == "reference_code"
                  else (value - (M - epsilon)) / epsilon - np.log(epsilon / M))
    out = np.where(near, beyond, -np.log1p(-np.where(near, 0.0, value) / M))
    return float(out) if out.ndim == 0 else out


def cvar_objective(loss: Any, t: Any, alpha: float, gamma: float) -> Any:
    r"""Fed-CVaR-Avg's client objective
    :math:`G = (1-\gamma)t + \frac{1-\gamma}{\alpha}[\ell - t]_+ + \gamma\ell`, elementwise
    (floats, NumPy, torch; autograd through ℓ and a tensor t; the subgradient at ℓ = t is the cold
    one, as relu'(0) = 0)."""
    return ((1.0 - gamma) * t + (1.0 - gamma) / alpha * _relu(loss - t) + gamma * loss)


class ClientObjective:
    r"""The plain objective, the mean loss :math:`\ell`; base of the objectives that change it.

    See the module docstring of :mod:`fastfair.aggregators.objectives` for the protocol.
    """

    #: Name of the objective in a client config (``OBJECTIVE_KEY``).
    kind: ClassVar[str] = "plain"
    #: Round inputs the clients report, each with the Flower metric key it travels under.
    reports: ClassVar[Mapping[str, str]] = {}

    def __call__(self, mean_loss: Any, params: Params = None, global_params: Params = None,
                 state: Any = None) -> Any:
        """The objective of a minibatch with mean loss ``mean_loss`` (scalar or ``[m]``)."""
        return mean_loss

    def initial_state(self) -> Optional[float]:
        """Start value of the trainable scalar the objective adds (None: it adds none)."""
        return None

    def state_lr(self, lr: float) -> float:
        """Step size of that scalar when the model steps with ``lr``."""
        return 0.0

    def report(self, state: Any) -> Dict[str, Any]:
        """Round inputs for the server from the final scalars ``state`` (``[m]`` or a float)."""
        return {}

    def check_step(self, lr: float) -> None:
        """Raises ValueError, naming the option, when plain SGD with step ``lr`` cannot be
        stable on the objective's own term whatever the loss (none here)."""

    def reply_metrics(self, state: Any = None) -> Dict[str, float]:
        """:meth:`report` of one client, keyed by the metric keys of :attr:`reports`."""
        if self.reports and state is None:
            raise ValueError("state is required: pass the value of the scalar the client "
                             f"trained beside its model ({type(self).__name__})")
        return {self.reports[name]: float(value) for name, value in self.report(state).items()}

    def options(self) -> Dict[str, Any]:
        """The objective's hyperparameters (plain numbers), as :meth:`to_config` sends them."""
        return {}

    def to_config(self) -> Dict[str, Any]:
        """``{OBJECTIVE_KEY: kind, "fastfair-<option>": value, ...}`` for a client's config."""
        return {OBJECTIVE_KEY: self.kind,
                **{OPTION_PREFIX + k: v for k, v in self.options().items()}}

    @classmethod
    def from_config(cls, config: Mapping[str, Any]) -> "ClientObjective":
        """The objective described by :meth:`to_config`'s entries in ``config`` (a Flower
        ``ConfigRecord`` or any mapping); a config without them gives the plain loss."""
        kind = config.get(OBJECTIVE_KEY, ClientObjective.kind)
        if kind not in OBJECTIVES:
            raise ValueError(f"config[{OBJECTIVE_KEY!r}] is {kind!r}; known objectives: "
                             f"{', '.join(sorted(OBJECTIVES))}")
        target = OBJECTIVES[kind]
        names = target.option_names
        missing = [OPTION_PREFIX + n for n in names if OPTION_PREFIX + n not in config]
        if missing:
            raise ValueError(f"config for the {kind!r} objective lacks {', '.join(missing)}: "
                             "build it with the rule's client_objective().to_config()")
        return target._from_options(**{n: config[OPTION_PREFIX + n] for n in names})

    #: Constructor arguments that :meth:`from_config` reads back.
    option_names: ClassVar[Tuple[str, ...]] = ()

    @classmethod
    def _from_options(cls, **options: Any) -> "ClientObjective":
        return cls(**options)

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.options().items())
        return f"{type(self).__name__}({args})"


class ProximalObjective(ClientObjective):
    r"""FedProx: :math:`\ell + \frac{\mu}{2}\lVert w - w^t\rVert^2` (needs ``params`` and
    ``global_params``)."""

    kind = "proximal"
    option_names = ("mu",)

    def __init__(self, mu: float) -> None:
        self.mu = check_scalar(mu, "mu", lo=0.0)

    def __call__(self, mean_loss: Any, params: Params = None, global_params: Params = None,
                 state: Any = None) -> Any:
        if params is None or global_params is None:
            raise ValueError("params and global_params are required by FedProx's proximal "
                             "term: pass the client's parameters and the received ones")
        return mean_loss + proximal_term(params, global_params, self.mu, np.ndim(mean_loss))

    def check_step(self, lr: float) -> None:
        r"""The proximal term's own SGD step multiplies :math:`w - w^t` by
        :math:`1 - \eta\mu`: it grows without bound (to NaN) once :math:`\eta\mu \ge 2`."""
        if lr * self.mu >= 2:
            raise ValueError(f"objective 'proximal': mu = {self.mu:g} with lr = {lr:g} makes the "
                             f"proximal step lr * mu = {lr * self.mu:g} >= 2, which diverges; "
                             f"give mu below {2 / lr:g} (mu in the FedProx paper: 0.001 to 1)")

    def options(self) -> Dict[str, Any]:
        return {"mu": self.mu}


class PropFairObjective(ClientObjective):
    r"""PropFair: :math:`-\log(1 - \ell/M)`, continued within ``epsilon`` of M by
    ``extension`` (:func:`propfair_loss`)."""

    kind = "propfair"
    option_names = ("M", "epsilon", "extension")

    def __init__(self, M: float, epsilon: float, extension: str = "huber") -> None:
        self.M, self.epsilon, self.extension = float(M), float(epsilon), str(extension)

    def __call__(self, mean_loss: Any, params: Params = None, global_params: Params = None,
                 state: Any = None) -> Any:
        return propfair_loss(mean_loss, self.M, self.epsilon, self.extension)

    def options(self) -> Dict[str, Any]:
        return {"M": self.M, "epsilon": self.epsilon, "extension": self.extension}


class CVaRObjective(ClientObjective):
    r"""Fed-CVaR-Avg (relay form): :math:`(1-\gamma)t + \frac{1-\gamma}{\alpha}[\ell - t]_+ +
    \gamma\ell`, trained jointly in the threshold t from the server's ``threshold``; the final
    t' is reported as ``thresholds`` (metric :data:`THRESHOLD_KEY`). t's step size is
    ``lr_threshold``, or (None) ``lr_threshold_ratio`` times the client learning rate."""

    kind = "cvar"
    option_names = ("alpha", "gamma", "threshold", "lr_threshold", "lr_threshold_ratio")
    reports = {"thresholds": THRESHOLD_KEY}

    def __init__(self, alpha: float, gamma: float, threshold: float,
                 lr_threshold: Optional[float] = None, lr_threshold_ratio: float = 1.0) -> None:
        self.alpha, self.gamma, self.threshold = float(alpha), float(gamma), float(threshold)
        self.lr_threshold = None if lr_threshold is None else float(lr_threshold)
        self.lr_threshold_ratio = float(lr_threshold_ratio)

    def __call__(self, mean_loss: Any, params: Params = None, global_params: Params = None,
                 state: Any = None) -> Any:
        if state is None:
            raise ValueError("state (the client's threshold t) is required by Fed-CVaR-Avg: "
                             "start from initial_state() and train it with the parameters")
        return cvar_objective(mean_loss, state, self.alpha, self.gamma)

    def initial_state(self) -> float:
        return self.threshold

    def state_lr(self, lr: float) -> float:
        return self.lr_threshold_ratio * lr if self.lr_threshold is None else self.lr_threshold

    def report(self, state: Any) -> Dict[str, Any]:
        if _is_torch(state):
            state = state.detach().cpu().numpy()
        return {"thresholds": state}

    def options(self) -> Dict[str, Any]:
        return {"alpha": self.alpha, "gamma": self.gamma, "threshold": self.threshold,
                "lr_threshold": self.lr_threshold, "lr_threshold_ratio": self.lr_threshold_ratio}

    def to_config(self) -> Dict[str, Any]:
        # A Flower ConfigRecord holds no None: an unset lr_threshold travels as -1.
        config = super().to_config()
        if self.lr_threshold is None:
            config[OPTION_PREFIX + "lr_threshold"] = -1.0
        return config

    @classmethod
    def _from_options(cls, **options: Any) -> "CVaRObjective":
        lr = options.pop("lr_threshold")
        return cls(**options, lr_threshold=None if lr is None or float(lr) < 0 else lr)


#: The rule whose options (names, defaults, checks) an objective takes, and which of them.
OBJECTIVE_RULES: Dict[str, Tuple[str, Tuple[str, ...]]] = {
    "proximal": ("fedprox", ("mu",)),
    "propfair": ("propfair", ("M", "epsilon", "extension")),
}

