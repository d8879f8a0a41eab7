"""SuPerFed's client passes for a cohort (``superfed_reduce``, ``superfed_step``, ``superfed_mix``)
against the same arithmetic written in plain PyTorch over the flat ``[m, P]`` rows.

Run: ``python -m pytest bench/bench_superfed.py -q -s``. The cohort is 32 clients of a
784-200-200-10 MLP (199k parameters, weights twinned, biases shared). Floors (bytes moved):
reduce reads f, l and the global model; step reads f, l, the gradient and both momentum buffers
and writes f, l, both buffers and the next mixed model; mix reads f and l and writes the mix.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from bench.conftest import best_time, sizes
from fastfair import ops

SHAPES = sizes([(784, 200), (200,), (200, 200), (200,), (200, 10), (10,)],
               [(20, 8), (8,), (8, 4), (4,)])
M = sizes(32, 4)
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 1e-4


@pytest.fixture(scope="module")
def cohort():
    layout = ops.SegmentLayout.from_shapes(SHAPES)
    P, S = layout.num_params, layout.num_segments
    gen = torch.Generator().manual_seed(0)
    rows = {name: torch.randn(M, P, generator=gen) * 0.1
            for name in ("f", "l", "grad", "buf_f", "buf_l")}
    rows["mixed"] = torch.empty(M, P)
    rng = np.random.default_rng(0)
    coefficients = {"lam": rng.uniform(0, 1, (M, S)), "prox": np.full((M, S), 0.01),
                    "orth": rng.standard_normal((M, 4)) * 1e-3}
    return layout, torch.randn(P, generator=gen) * 0.1, rows, coefficients


def _element(values, layout):
    """Per-segment values ``[m, S]`` spread over each segment's elements: ``[m, P]`` float32."""
    sizes_ = torch.as_tensor(np.diff(layout.offsets))
    return torch.repeat_interleave(torch.as_tensor(values, dtype=torch.float32), sizes_, dim=1)


def _torch_reduce(f, l, g, layout):
    out = torch.zeros(f.shape[0], layout.num_segments, 4, dtype=torch.float64)
    for s in range(layout.num_segments):
        a, b = int(layout.offsets[s]), int(layout.offsets[s + 1])
        fs = f[:, a:b]
        if layout.twinned[s]:
            ls = l[:, a:b]
            out[:, s, 0] = (fs * ls).sum(1, dtype=torch.float64)
            out[:, s, 1] = (fs * fs).sum(1, dtype=torch.float64)
            out[:, s, 2] = (ls * ls).sum(1, dtype=torch.float64)
        out[:, s, 3] = ((fs - g[a:b]) ** 2).sum(1, dtype=torch.float64)
    return out


def _torch_step(f, l, g, grad, buf_f, buf_l, mixed, lam, prox, orth, layout):
    twin = _element(np.repeat(layout.twinned[None].astype(np.float64), f.shape[0], 0), layout)
    lam_el = _element(lam, layout) * twin
    o = torch.as_tensor(orth, dtype=torch.float32)
    g_f = ((1 - lam_el) * grad + _element(prox, layout) * (f - g) + WEIGHT_DECAY * f
           + twin * (o[:, 0:1] * l + o[:, 1:2] * f))
    g_l = lam_el * grad + WEIGHT_DECAY * l + twin * (o[:, 2:3] * f + o[:, 3:4] * l)
    f.sub_(buf_f.mul_(MOMENTUM).add_(g_f), alpha=LR)
    l.sub_(twin * buf_l.mul_(MOMENTUM).add_(g_l), alpha=LR)
    torch.add(f, lam_el * (l - f), out=mixed)


def _case(name, layout):
    return f"superfed {name} m={M} P={layout.num_params}"


def test_superfed_reduce(floor_report, cohort):
    layout, g, rows, _ = cohort
    f, l = rows["f"], rows["l"]
    moved = (2 * M + 1) * layout.num_params * 4
    case = _case("reduce", layout)
    floor_report.add(case, "fastfair", best_time(lambda: ops.superfed_reduce(f, l, g, layout)),
                     moved)
    floor_report.add(case, "torch (per layer)", best_time(lambda: _torch_reduce(f, l, g, layout)),
                     moved, reference=True)


def test_superfed_step(floor_report, cohort):
    layout, g, rows, c = cohort
    r = rows
    moved = 10 * M * layout.num_params * 4

    def fast():
        ops.superfed_step(r["f"], r["l"], g, r["grad"], layout=layout, lam=c["lam"],
                          mixed=r["mixed"], buf_f=r["buf_f"], buf_l=r["buf_l"], prox=c["prox"],
                          orth=c["orth"], lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)

    case = _case("step", layout)
    floor_report.add(case, "fastfair", best_time(fast), moved)
    floor_report.add(case, "torch eager",
                     best_time(lambda: _torch_step(r["f"], r["l"], g, r["grad"], r["buf_f"],
                                                   r["buf_l"], r["mixed"], c["lam"], c["prox"],
                                                   c["orth"], layout)), moved, reference=True)


def test_superfed_mix(floor_report, cohort):
    layout, _, rows, c = cohort
    f, l, out = rows["f"], rows["l"], rows["mixed"]
    twin = _element(np.repeat(layout.twinned[None].astype(np.float64), M, 0), layout)
    moved = 3 * M * layout.num_params * 4
    case = _case("mix", layout)
    floor_report.add(case, "fastfair",
                     best_time(lambda: ops.superfed_mix(f, l, c["lam"], layout, out=out)), moved)
    floor_report.add(case, "torch",
                     best_time(lambda: torch.add(f, _element(c["lam"], layout) * twin * (l - f),
                                                 out=out)), moved, reference=True)
