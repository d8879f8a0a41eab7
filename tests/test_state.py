"""Every state_dict saves the way users save: torch.save then torch.load with torch's defaults
(weights only), or fastfair.save_state / load_state with NumPy alone; both load exactly, neither
runs code, and pickling at any protocol keeps the NumPy arrays."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import fastfair
from fastfair.aggregators import registry

torch = pytest.importorskip("torch")

RULES = list(registry.RULES)


def _played(rule: str):
    agg = registry.build(rule, 50)
    rng = np.random.default_rng(0)
    for _ in range(3):
        ids = np.arange(50) if agg.full_participation else rng.choice(50, 8, replace=False)
        m = len(ids)
        inputs = {name: rng.normal(size=(m, 5)) if name == "updates" else rng.uniform(0.5, 2.0, m)
                  for name in agg.round_inputs}
        agg.weights(ids, rng.uniform(0.5, 2.0, m), num_samples=np.full(m, 10.0), **inputs)
    return agg


def _equal(a, b):
    assert set(a) == set(b)
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, dict):
            _equal(x, y)
        elif isinstance(x, np.ndarray) or isinstance(y, (np.ndarray, torch.Tensor)):
            np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
        else:
            assert x == y, key


@pytest.mark.parametrize("rule", RULES)
def test_torch_save_then_torch_load_with_defaults(rule, tmp_path):
    agg = _played(rule)
    torch.save(agg.state_dict(), tmp_path / "s.pt")
    loaded = torch.load(tmp_path / "s.pt")  # torch's default: weights_only=True
    fresh = registry.build(rule, 50)
    fresh.load_state_dict(loaded)
    _equal(fresh.state_dict(), agg.state_dict())


@pytest.mark.parametrize("rule", RULES)
def test_save_state_with_numpy_alone(rule, tmp_path):
    agg = _played(rule)
    fastfair.save_state(tmp_path / "s.npz", agg.state_dict())
    fresh = registry.build(rule, 50)
    fresh.load_state_dict(fastfair.load_state(tmp_path / "s.npz"))
    _equal(fresh.state_dict(), agg.state_dict())


def test_server_optimizer_state_saves_both_ways(tmp_path):
    opt = registry.build_server_optimizer("fedadam", lr=0.1)
    params = np.zeros(4)
    for step in range(3):
        opt.step(params, np.full(4, 0.1 * (step + 1)))
    torch.save(opt.state_dict(), tmp_path / "o.pt")
    fastfair.save_state(tmp_path / "o.npz", opt.state_dict())
    for loaded in (torch.load(tmp_path / "o.pt"), fastfair.load_state(tmp_path / "o.npz")):
        fresh = registry.build_server_optimizer("fedadam", lr=0.1)
        fresh.load_state_dict(loaded)
        a, b = params.copy(), params.copy()
        opt_copy = copy.deepcopy(opt)
        opt_copy.step(a, np.ones(4))
        fresh.step(b, np.ones(4))
        np.testing.assert_array_equal(a, b)


def test_every_rule_is_covered():
    assert {"aaggff-s", "fedprox"} <= set(RULES) and len(RULES) == len(registry.RULES)


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_pickle_at_any_protocol_keeps_the_arrays(protocol):
    """Only torch.save's pickler gets tensors; pickle at every protocol (2, torch.save's own,
    included) returns a plain dict equal to the state, arrays as arrays, that loads exactly."""
    agg = _played("aaggff-d")
    state = agg.state_dict()
    loaded = pickle.loads(pickle.dumps(state, protocol=protocol))
    assert type(loaded) is dict
    arrays = [v for v in loaded["state"].values() if hasattr(v, "shape")]
    assert arrays and all(isinstance(v, np.ndarray) for v in arrays)
    _equal(loaded, state)
    fresh = registry.build("aaggff-d", 50)
    fresh.load_state_dict(loaded)
    _equal(fresh.state_dict(), state)


def test_copies_stay_state_dicts_of_arrays():
    state = _played("aaggff-d").state_dict()
    for twin in (copy.copy(state), copy.deepcopy(state)):
        assert isinstance(twin, fastfair.StateDict)
        _equal(twin, state)
    deep = copy.deepcopy(state)
    assert all(isinstance(v, np.ndarray) for v in deep["state"].values() if hasattr(v, "shape"))


def test_a_file_that_is_not_a_state_is_refused(tmp_path):
    np.savez(tmp_path / "x.npz", a=np.zeros(2))
    with pytest.raises(ValueError, match="not a state file written by fastfair.save_state"):
        fastfair.load_state(tmp_path / "x.npz")
    with pytest.raises(TypeError, match=r"state\['bad'\] is a object"):
        fastfair.save_state(tmp_path / "y.npz", {"bad": object()})


def _zip(path, entries):
    """A zip archive holding ``entries`` ``{name: bytes}`` as stored members."""
    import zipfile

    with zipfile.ZipFile(path, "w") as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return path


def _npy_header(shape, descr="<f8"):
    import io

    out = io.BytesIO()
    np.lib.format.write_array_header_1_0(out, {"descr": descr, "fortran_order": False,
                                               "shape": shape})
    return out.getvalue()


def _broken_state_files(tmp_path):
    """``(label, path)`` of files that are not states, each once a raw error of another type."""
    from fastfair.state import SKELETON

    plain = tmp_path / "plain.npz"  # a .npy under an .npz name: np.load gives an array
    with open(plain, "wb") as f:
        np.save(f, np.zeros(3))
    yield "plain .npy (TypeError)", plain
    damaged = tmp_path / "damaged.npz"
    fastfair.save_state(damaged, {"a": np.arange(50.0)})
    data = bytearray(damaged.read_bytes())
    data[-30:] = b"\0" * 30  # the central directory's end: BadZipFile
    damaged.write_bytes(bytes(data))
    yield "damaged zip (BadZipFile)", damaged
    deep = ("[" * 50_000 + "]" * 50_000).encode()
    yield "deep skeleton (RecursionError)", _zip(tmp_path / "deep.npz", {
        SKELETON + ".npy": _npy_header((len(deep),), "|u1") + deep})
    yield "8 TiB declared (MemoryError)", _zip(tmp_path / "huge.npz", {
        SKELETON + ".npy": _npy_header((2,), "|u1") + b"{}",
        "a0.npy": _npy_header((2**40,)) + b"\0" * 16})


@pytest.mark.parametrize("case", range(4), ids=["plain-npy", "bad-zip", "deep", "8-tib"])
def test_a_broken_or_forged_state_file_is_one_value_error_naming_it(tmp_path, case):
    label, path = list(_broken_state_files(tmp_path))[case]
    if case == 3:  # a few hundred bytes declare 8 TiB
        assert path.stat().st_size < 1024, label
    with pytest.raises(ValueError, match=rf"{path} is not a state file written by "
                                         r"fastfair.save_state \("):
        fastfair.load_state(path)


class _Payload:
    """Unpickled, it would run code: appends to RAN."""

    def __reduce__(self):
        return (RAN.append, ("ran",))


RAN: list = []


def test_load_state_runs_no_code_from_a_crafted_file(tmp_path):
    from fastfair.state import SKELETON

    fastfair.save_state(tmp_path / "good.npz", {"a": np.zeros(2)})
    with np.load(tmp_path / "good.npz") as good:
        entries = {k: good[k] for k in good.files}
    payload = np.empty(1, dtype=object)
    payload[0] = _Payload()
    skeleton = np.frombuffer(b'{"a": {"__array__": 0}}', np.uint8)
    np.savez(tmp_path / "bad.npz", **{**entries, "a0": payload, SKELETON: skeleton})
    with pytest.raises(ValueError, match="bad.npz is not a state file written by "
                                         "fastfair.save_state"):
        fastfair.load_state(tmp_path / "bad.npz")
    assert RAN == []


@pytest.mark.parametrize("rule", ["aaggff-d", "aaggff-s"])
def test_torch_save_writes_tensors_and_plain_types_only(rule, tmp_path):
    """What torch.save writes of a state names no class of fastfair or NumPy, so torch's
    weights-only loader needs no allow-list and a reader without fastfair opens it."""
    import zipfile

    torch.save(_played(rule).state_dict(), tmp_path / "s.pt")
    with zipfile.ZipFile(tmp_path / "s.pt") as archive:
        data = archive.read(next(n for n in archive.namelist() if n.endswith("data.pkl")))
    assert b"fastfair" not in data and b"numpy" not in data
    assert b"torch._utils" in data  # the tensors, rebuilt by torch
