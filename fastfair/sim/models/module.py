"""Any ``torch.nn.Module`` as a flat model (:class:`ModuleModel`): its parameters and buffers as
one flat vector per client, a cohort trained batched through ``torch.func``."""

from __future__ import annotations

import contextlib
import copy
import functools
import math
import threading
import warnings
from collections import OrderedDict
from typing import Any, Callable, ContextManager, Dict, Iterator, List, Optional, Sequence, Tuple

import torch

from fastfair.sim.models.flat import FlatModel, TrainingStep
from fastfair.sim.models.layers import CohortMode

#: The values of ``ModuleModel(init=...)``.
INIT_MODES = ("seed", "given")
#: The values of ``ModuleModel(cohort=...)``.
COHORT_MODES = ("auto", "vmap", "alone")
#: ``cohort="auto"`` trains copies alone on the CPU when fewer than this many fit in one
#: training pass (:meth:`~fastfair.sim.models.flat.FlatModel.rows_per_pass`), i.e. above
#: ``CPU_PASS_BYTES / 8`` bytes of parameters (512K float32 parameters): so few copies of a
#: large model train slower in one ``vmap`` program than each alone (docs/benchmarks.md).
ALONE_BELOW = 8

_OTHER_RANDOMNESS = ("the module calls a random operation other than dropout (or, trained "
                     "alone, calls dropout on some forward passes only); training reproduces "
                     "only dropout per client (keyed masks)")


class ModuleModel(FlatModel):
    """Any ``torch.nn.Module``, trained for a whole cohort at once: ``torch.func.vmap`` over
    ``functional_call`` runs m copies, each with its own parameters and buffers.

    Inputs keep their shape: the module maps ``x [B, *sample_shape]`` (feature vectors, images
    ``[C, H, W]``, token ids ``[T]``) to logits ``[B, C]``, or ``[B, T, C]`` with a label per
    position. Dropout (``nn.Dropout*``, ``F.dropout*``) draws independent masks per client,
    keyed by (seed, round, client, step), so a client trains identically in any cohort or
    process; batch norm keeps per-client running statistics from the client's own rows (see
    :mod:`fastfair.sim.models.layers`). Buffers ride in the flat vector after the parameters, so the
    server averages them with the rule's coefficients like the parameters. Another random
    operation inside ``forward`` is refused: it could not be reproduced per client.

    The initial global model comes from the run's seed by default (``init="seed"``): a copy of
    the module has every submodule's ``reset_parameters()`` called, in ``module.modules()``
    order, with torch's generator seeded by ``generator.initial_seed()``; the simulator's runners
    pass a generator seeded from the run's ``MODEL_INIT`` stream
    (``raw_seed(seed, Stream.MODEL_INIT)``, :mod:`fastfair.sim.seeding`), so different seeds
    start from different weights and every rule of one seed (a sweep's paired runs) from the
    same ones. The draws happen on the CPU under a forked random state: the module itself and
    torch's global generator are left as they were. Submodules without ``reset_parameters``
    (e.g. a custom layer holding its own ``nn.Parameter``, or ``nn.MultiheadAttention``, whose
    method is private) keep the module's given weights, as do buffers that no
    ``reset_parameters`` touches; with ``init="given"`` the whole module starts from its given
    parameters and buffers, whatever the seed.

    Parameters
    ----------
    module
        The network, mapping inputs to logits.
    init
        ``"seed"`` (default): initial weights from the run's seed, as above. ``"given"``: the
        module's current parameters and buffers are the initial global model of every run.
    loss
        Per-position loss ``loss(logits [N, C], target [N]) -> [N]`` (default cross-entropy,
        e.g. ``functools.partial(F.cross_entropy, reduction="none", label_smoothing=0.1)``);
        accuracy stays ``argmax == target``.
    eval_rows
        Samples per forward pass in evaluation.
    cohort
        How a cohort trains. ``"vmap"``: the copies of a training pass as one ``vmap`` program
        over their ``[m, P]`` rows. ``"alone"`` (the CPU only; other devices batch): each copy
        as the plain module, its parameters views of its row updated in place per tensor, on
        its real rows only, the cohort's clients concurrently on the process's threads
        (:mod:`fastfair.sim.training.alone`). ``"auto"`` (default): alone on the CPU for
        models of more than ``CPU_PASS_BYTES / ALONE_BELOW`` bytes of parameters, where the
        module's own kernels beat ``vmap``'s batching rules, else ``vmap``. The two ways round
        differently; each gives a client the same numbers in any company.
    channels_last
        Whether alone training runs 2-d convolutions and max pooling on ``channels_last``
        inputs (default: on; :class:`~fastfair.sim.models.layers.CohortMode`), for which
        oneDNN's kernels run faster; the values are the same, the rounding
        of the convolutions may differ.
    """

    def __init__(self, module: torch.nn.Module, *, init: str = "seed",
                 loss: Optional[Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = None,
                 eval_rows: int = 1024, cohort: str = "auto", channels_last: bool = True) -> None:
        if not isinstance(module, torch.nn.Module):
            raise TypeError(f"module must be a torch.nn.Module; got {type(module).__name__}")
        if init not in INIT_MODES:
            raise ValueError(f"init must be one of {', '.join(map(repr, INIT_MODES))}; got "
                             f"{init!r}: 'seed' draws the initial weights from the run's seed, "
                             "'given' starts from the module's own")
        for name, sub in module.named_modules():
            if isinstance(sub, torch.nn.modules.batchnorm._BatchNorm) and sub.momentum is None \
                    and sub.track_running_stats:
                raise ValueError(f"{name or 'the module'}: batch norm with momentum=None (a "
                                 "cumulative average) cannot run batched; give it a momentum")
        params, buffers = list(module.named_parameters()), list(module.named_buffers())
        if not params:
            raise ValueError("the module has no parameters to train")
        if eval_rows < 1:
            raise ValueError(f"eval_rows must be >= 1; got {eval_rows}")
        if cohort not in COHORT_MODES:
            raise ValueError(f"cohort must be one of {', '.join(map(repr, COHORT_MODES))}; got "
                             f"{cohort!r}")
        self.cohort, self.channels_last = cohort, bool(channels_last)
        self._spares: List[torch.nn.Module] = []  # module copies for alone training
        self._lock = threading.Lock()
        self.module, self.eval_rows, self._loss = module, int(eval_rows), loss
        self.random = True  # dropout may hide in any forward (F.dropout): always pass keys
        self._alone_needs_no_mode = False  # see saw_pass
        self.param_names = [n for n, _ in params]
        self.buffer_names = [n for n, _ in buffers]
        self.names = self.param_names + self.buffer_names
        self.shapes = [tuple(t.shape) for _, t in params + buffers]
        self._dtypes = [t.dtype for _, t in params + buffers]
        self._sizes = [math.prod(s) for s in self.shapes]
        self.num_buffers = sum(self._sizes[len(params):])
        # Each parameter's offset in alone training's buffer, rounded up to 16 floats (64
        # bytes), and the buffer's size last.
        self._aligned = [0]
        for size in self._sizes[:len(params)]:
            self._aligned.append(self._aligned[-1] + size + (-size % 16))
        self._initial = self._flatten(module)
        self.init_mode = init
        #: The submodules (by name, "" for the module itself) whose ``reset_parameters`` the
        #: seeded initialisation calls.
        self.resettable: List[str] = [name for name, sub in module.named_modules()
                                      if callable(getattr(sub, "reset_parameters", None))]
        if init == "seed" and not self.resettable:
            warnings.warn("init='seed': no submodule of the module has reset_parameters(), so "
                          "every seed starts from the module's given weights; pass "
                          "init='given' to say so", UserWarning, stacklevel=2)

    def __getstate__(self) -> Dict[str, object]:
        """Pickled and deep-copied without the thread lock and the module copies of alone
        training (remade as needed)."""
        state = dict(self.__dict__)
        del state["_lock"], state["_spares"]
        return state

    def __setstate__(self, state: Dict[str, object]) -> None:
        self.__dict__.update(state)
        self._spares, self._lock = [], threading.Lock()

    def _flatten(self, module: torch.nn.Module) -> torch.Tensor:
        """``module``'s parameters then buffers as one float32 vector ``[P]`` (on its device),
        in the order of :attr:`names`."""
        tensors: Dict[str, torch.Tensor] = dict(module.named_parameters())
        tensors.update(module.named_buffers())
        return torch.cat([tensors[n].detach().reshape(-1).float() for n in self.names])

    def position_loss(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """The ``loss`` given at construction, else cross-entropy."""
        return super().position_loss(logits, target) if self._loss is None \
            else self._loss(logits, target)

    def _views(self, flat: torch.Tensor, names: Sequence[str],
               first: int) -> Dict[str, torch.Tensor]:
        """``{name: [m, *shape]}`` views of the columns of ``flat [m, sum of sizes]``."""
        sizes = self._sizes[first:first + len(names)]
        shapes = self.shapes[first:first + len(names)]
        return {n: t.view(flat.shape[0], *s)
                for n, t, s in zip(names, flat.split(sizes, dim=1), shapes)}

    def forward(self, params: torch.Tensor, x: torch.Tensor,
                step: Optional[TrainingStep] = None) -> torch.Tensor:
        """``params [m, P]`` (parameters, then buffers) on ``x [m, B, *sample_shape]``: training
        mode with the step's masks, keys and buffers (updated in place for the clients with a
        real row) when ``step`` is given, evaluation mode with the buffers of ``params``
        otherwise."""
        if step is not None:
            return self.forward_pieces(self.trained_pieces(params), x, step)
        m = params.shape[0]
        buffers = params[:, params.shape[1] - self.num_buffers:].detach().clone()
        valid = torch.ones(x.shape[:2], dtype=torch.bool, device=x.device)
        keys = torch.zeros(m, dtype=torch.int64, device=x.device)
        return self._apply(self.trained_pieces(params), buffers, x, valid, keys, training=False)

    def forward_pieces(self, pieces: Sequence[torch.Tensor], x: torch.Tensor,
                       step: Optional[TrainingStep] = None) -> torch.Tensor:
        """Training mode from the parameter pieces, with the step's masks, keys and buffers
        (updated in place for the clients with a real row); evaluation reads the buffers from
        the flat row, through :meth:`forward`."""
        if step is None:
            raise ValueError("ModuleModel.forward_pieces trains (it needs a TrainingStep); "
                             "evaluate through forward")
        valid = step.valid.to(x.device)
        before = step.buffers.clone()
        out = self._apply(pieces, step.buffers, x, valid, step.keys, training=True)
        if self.num_buffers:
            active = valid.any(1, keepdim=True)
            step.buffers.copy_(torch.where(active, step.buffers, before))
        return out

    def _apply(self, pieces, flat_buffers, x, valid, keys, training: bool):
        """The m copies on their inputs, in training or evaluation mode."""
        m = x.shape[0]
        weights = dict(zip(self.param_names, pieces))
        buffers = self._views(flat_buffers, self.buffer_names, len(self.param_names))
        with self._borrowed() as module:
            module.train(training)
            if self.trains_alone(x.device) and m:
                return torch.cat([self._alone(module, weights, buffers, x, valid, keys, k)
                                  for k in range(m)])
            return self._one_by_vmap(module, weights, buffers, x, valid, keys)

    @contextlib.contextmanager
    def _borrowed(self) -> Iterator[torch.nn.Module]:
        """A copy of the module for this thread's call (made once, kept for reuse): calls on
        several threads at once (alone training, evaluation) each rebind their own copy."""
        with self._lock:
            module = self._spares.pop() if self._spares else copy.deepcopy(self.module)
        try:
            yield module
        finally:
            with self._lock:
                self._spares.append(module)

    def trains_alone(self, device: torch.device) -> bool:
        """Whether training runs each copy alone as the plain module (``cohort``, above)."""
        if device.type != "cpu" or self.cohort == "vmap":
            return False
        return self.cohort == "alone" or (self.rows_per_pass(device) or 1) < ALONE_BELOW

    @contextlib.contextmanager
    def client_module(self, row: torch.Tensor
                      ) -> Iterator[Tuple[torch.nn.Module, List[torch.Tensor]]]:
        """A copy of the module in training mode whose parameters and buffers hold the values
        of ``row [P]`` (parameters, then buffers), for one client's training on this thread;
        yields ``(module, leaves)``, the parameters as gradient leaves in ``param_names``
        order. The leaves (updated in place, under ``no_grad``) and the running statistics
        batch norm updates are written to ``row`` after the block. Raises ValueError
        after the block when the module drew from torch's generator (a random operation other
        than dropout, which could not be reproduced per client)."""
        # The parameters train in a buffer of their own, each tensor at a 64-byte boundary
        # (torch's CPU allocator aligns the buffer): in the flat row a tensor starts wherever
        # the sizes before it end (the char-LSTM's first LSTM weight 8 floats off), and products
        # and in-place updates run slower on a misaligned tensor (docs/benchmarks.md, design
        # measurements). The buffers train in
        # a copy of their own too: sharing the parameters' version counter, batch norm's update
        # in the forward pass would invalidate the tensors saved for the backward one. Both go
        # back to the row after the block.
        width = row.numel() - self.num_buffers
        n = len(self.param_names)
        trained = row.new_empty(self._aligned[-1])
        pieces = row[:width].split(self._sizes[:n])
        slots = [trained[a:a + size] for a, size in zip(self._aligned, self._sizes[:n])]
        for slot, piece in zip(slots, pieces):
            slot.copy_(piece)
        buffers = row[width:].clone()
        views = dict(zip(self.names, [*slots, *buffers.split(self._sizes[n:])]))
        leaves = []
        with self._borrowed() as module:
            for names, table in ((self.param_names, "_parameters"),
                                 (self.buffer_names, "_buffers")):
                for name in names:
                    owner, _, attr = name.rpartition(".")
                    view = views[name].view(self.shapes[self.names.index(name)]).detach()
                    if table == "_parameters":
                        view.requires_grad_(True)
                        leaves.append(view)
                    getattr(module.get_submodule(owner), table)[attr] = view
            module.train(True)
            state = torch.random.get_rng_state()
            yield module, leaves
            for slot, piece in zip(slots, pieces):
                piece.copy_(slot)
            row[width:] = buffers
        if not torch.equal(state, torch.random.get_rng_state()):
            raise ValueError(_OTHER_RANDOMNESS)

    def client_mode(self, key: Optional[torch.Tensor], rows: int) -> ContextManager[Any]:
        """The mode one client's alone forward pass runs under: dropout keyed by the step's
        ``key`` (0-dim int64), batch norm over its ``rows`` real samples; nothing once a pass
        under it has handled none of the module's calls (:meth:`saw_pass`)."""
        if self._alone_needs_no_mode:
            return contextlib.nullcontext()
        return CohortMode(torch.zeros((), dtype=torch.int64) if key is None else key,
                          torch.ones(rows, dtype=torch.bool), self.channels_last)

    def saw_pass(self, mode: object) -> None:
        """After an alone forward pass under ``mode`` (:meth:`client_mode`): when the mode
        handled none of its calls (no dropout, batch norm, 2-d convolution or max pooling in
        the module), the next passes run without it, saving the Python dispatch of every
        operation (3% of the char-LSTM's round). A module that calls dropout on a later pass
        only is refused then, as any other draw from torch's generator is."""
        if isinstance(mode, CohortMode) and not mode.handled:
            self._alone_needs_no_mode = True

    def input_layout(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` as alone training feeds it: images ``[B, C, H, W]`` in ``channels_last``
        memory format when ``channels_last``, anything else as it is."""
        if self.channels_last and x.dim() == 4 and x.is_floating_point():
            return x.contiguous(memory_format=torch.channels_last)
        return x

    @staticmethod
    def _one(module, weights, buffers, x, valid, key):
        from torch.func import functional_call

        with CohortMode(key, valid):
            return functional_call(module, (weights, buffers), (x,))

    def _one_by_vmap(self, module, weights, buffers, x, valid, keys):
        """The m copies as one ``vmap`` program."""
        from torch.func import vmap

        try:
            return vmap(functools.partial(self._one, module), randomness="error")(
                weights, buffers, x, valid, keys)
        except RuntimeError as exc:
            if "randomness" not in str(exc):
                raise
            raise ValueError(_OTHER_RANDOMNESS) from None

    def _alone(self, module, weights, buffers, x, valid, keys, k):
        """Copy k run as the plain module (``[1, B, ...]`` out): a model that trains alone
        (:meth:`trains_alone`) skips ``vmap``, whose batched products and grouped
        convolutions are slower than the module's own, and runs alone in any company, so its
        numbers never depend on it. A draw from torch's generator shows a random operation
        other than dropout, as ``vmap``'s check would."""
        def row(t: torch.Tensor) -> torch.Tensor:
            # One copy's slice; a view when it is the only one (in training), whose gradient
            # needs no zero-filled [m, ...] tensor as an index's does.
            return t.view(t.shape[1:]) if t.shape[0] == 1 else t[k]

        state = torch.random.get_rng_state()
        out = self._one(module, {n: row(w) for n, w in weights.items()},
                        {n: row(b) for n, b in buffers.items()}, row(x), row(valid), row(keys))
        if not torch.equal(state, torch.random.get_rng_state()):
            raise ValueError(_OTHER_RANDOMNESS)
        return out.unsqueeze(0)

    def init(self, generator: Optional[torch.Generator]) -> torch.Tensor:
        """The initial global model ``[P]`` (parameters, then buffers).

        With ``init="seed"`` and a ``generator``: a copy of the module, moved to the CPU, has
        every submodule's ``reset_parameters()`` called (in ``module.modules()`` order) under
        torch's generator seeded by ``generator.initial_seed()`` inside
        ``torch.random.fork_rng``, so the result depends on the generator's seed alone (not on
        its state, the global generator or the device) and neither the module nor torch's global
        random state changes. Submodules without ``reset_parameters`` keep their given weights.
        With ``init="given"``, or a ``generator`` of None, the module's given weights."""
        if self.init_mode == "given" or generator is None:
            return self._initial.clone()
        if not isinstance(generator, torch.Generator):
            raise TypeError(f"generator must be a torch.Generator or None; got "
                            f"{type(generator).__name__}")
        seed = generator.initial_seed()  # derived by the caller (Stream.MODEL_INIT)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            fresh = copy.deepcopy(self.module).cpu()
            with torch.no_grad():
                for sub in fresh.modules():
                    reset = getattr(sub, "reset_parameters", None)
                    if callable(reset):
                        reset()
        return self._flatten(fresh)

    def state_dict(self, params: torch.Tensor) -> "OrderedDict[str, torch.Tensor]":
        """The module's ``state_dict`` (its own keys and dtypes) holding ``params [P]``, ready
        for ``module.load_state_dict``."""
        flat = super().state_dict(params)
        dtypes = dict(zip(self.names, self._dtypes))
        return OrderedDict((n, flat[n].to(dtypes[n]) if dtypes[n].is_floating_point
                            else flat[n].round().to(dtypes[n])) for n in self.module.state_dict())
