"""The NumPy-only surface of an installed fastfair wheel, run where NumPy is the only other package.

Run by .ci/wheel-smoke (a repaired manylinux wheel in a fresh venv) and by cibuildwheel's
test-command (pyproject.toml). Run it from outside the source tree, so that the installed wheel,
not the checkout, is imported. Exits non-zero on the first failure.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

import fastfair
from fastfair import aggregators, ops


def main() -> int:
    where = Path(fastfair.__file__).resolve().parent
    info = fastfair.build_info()
    print(f"fastfair {fastfair.__version__} from {where}")
    print(f"build: {info}")
    assert info["version"] == fastfair.__version__, (info["version"], fastfair.__version__)
    # A wheel ships its type information: the marker, the compiled core's stub and the stubs
    # that list each lazy package's names (read at import, fastfair/_lazy.py).
    stubs = [str(p.relative_to(where)) for p in where.rglob("__init__.pyi")]
    assert len(stubs) >= 10, f"the wheel lacks the packages' stubs; it has {stubs}"
    for name in ("py.typed", "_C.pyi"):
        assert (where / name).is_file(), f"the wheel lacks fastfair/{name}"

    rng = np.random.default_rng(0)
    # Ops on NumPy arrays.
    updates = rng.normal(size=(5, 1000)).astype(np.float32)
    coef = np.array([0.1, 0.2, 0.3, 0.25, 0.15])
    avg = ops.weighted_average(updates, coef)
    np.testing.assert_allclose(avg, coef @ updates.astype(np.float64), rtol=1e-5, atol=1e-6)
    x = rng.normal(size=10_000)
    p = ops.softmax(x)
    np.testing.assert_allclose(p, np.exp(x - x.max()) / np.exp(x - x.max()).sum(), rtol=1e-12)
    fastfair.set_num_threads(2)
    assert fastfair.get_num_threads() == 2
    np.testing.assert_allclose(ops.softmax(x), p, rtol=0, atol=0)  # same result on 2 threads

    # Aggregators: an AAggFF-D round and a FedAvg round, then the model update.
    global_params = rng.normal(size=1000)
    client_ids = np.array([3, 17, 42, 99])
    losses = np.array([0.9, 0.4, 1.3, 0.7])
    for name in ("aaggff-d", "fedavg"):
        agg = aggregators.build(name, 100)
        w = np.asarray(agg.weights(client_ids, losses, num_samples=np.array([10, 20, 30, 40])))
        assert w.shape == (4,) and np.isfinite(w).all() and abs(w.sum() - 1) < 1e-9, (name, w)
        deltas = rng.normal(size=(4, 1000))
        new = agg.aggregate(deltas, w, base=global_params)
        assert np.asarray(new).shape == (1000,) and np.isfinite(new).all(), name
        state = agg.state_dict()
        again = aggregators.build(name, 100)
        again.load_state_dict(state)
        print(f"{name}: coefficients {np.round(w, 4).tolist()}")

    leaked = sorted(m for m in sys.modules if m == "torch" or m.startswith("torch."))
    assert not leaked, f"the NumPy-only surface imported torch: {leaked[:3]}"
    print("wheel surface: ok (ops and aggregators on NumPy arrays, no torch)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
