"""Hostile data files: every bad file is refused with one
ValueError naming the file (and the client, field and sample where there is one), before it
can change a result; nothing blocks on a named pipe; valid files of any JSON escaping read."""

from __future__ import annotations

import gzip
import json
import os
import pickle
import signal
import struct
import zipfile

import numpy as np
import pytest
import torch

from fastfair import _files as files
from fastfair.sim import checkpoint
from fastfair.sim.data import ArrayDataset
from fastfair.sim.data.catalog import count_clients, open_files
from fastfair.sim.data.leaf_json import LeafFile
from fastfair.sim.data.vision import read_cifar_batch, read_idx
from tests.helpers import sim_files as sf


@pytest.fixture
def rng():
    return np.random.default_rng(11)


@pytest.fixture
def no_hang():
    """Fails the test (instead of hanging the suite) when it blocks for 20 s."""
    def expire(signum, frame):
        raise TimeoutError("blocked for 20 s")
    before = signal.signal(signal.SIGALRM, expire)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, before)


# --------------------------------------------------------------------------------- labels
@pytest.mark.parametrize("classes", [10, 100])
def test_cifar_labels_outside_the_classes_are_refused_naming_file_and_index(tmp_path, rng,
                                                                             classes):
    sf.write_cifar(tmp_path, rng, classes=classes)
    folder = tmp_path / ("cifar-10-batches-py" if classes == 10 else "cifar-100-python")
    name = "cifar10" if classes == 10 else "cifar100"
    key = "labels" if classes == 10 else "fine_labels"
    sf.edit_cifar_batch(folder / ("test_batch" if classes == 10 else "test"),
                        lambda b: b[key].__setitem__(4, -1))
    with pytest.raises(ValueError, match=r"test.*: label -1 at index 4 is outside \[0, "
                                         f"{classes}\\)"):
        open_files(name, str(tmp_path), 5, partition="iid")
    with pytest.raises(ValueError, match="label -1 at index 4"):
        read_cifar_batch(str(folder / ("test_batch" if classes == 10 else "test")), key)


def test_cifar_labels_too_large_or_fractional_name_the_batch(tmp_path, rng):
    sf.write_cifar(tmp_path, rng)
    folder = tmp_path / "cifar-10-batches-py"
    sf.edit_cifar_batch(folder / "data_batch_3", lambda b: b["labels"].__setitem__(7, 10))
    with pytest.raises(ValueError, match=r"data_batch_3: label 10 at index 7 is outside"):
        open_files("cifar10", str(tmp_path), 5, partition="iid")
    sf.edit_cifar_batch(folder / "data_batch_3", lambda b: b["labels"].__setitem__(7, 2.5))
    with pytest.raises(ValueError, match=r"data_batch_3: .*integer.* 2\.5 at index 7"):
        read_cifar_batch(str(folder / "data_batch_3"), "labels")


def test_idx_labels_outside_the_classes_name_the_file(tmp_path, rng):
    sf.write_mnist(tmp_path, "MNIST", rng)
    labels = rng.integers(0, 10, 100).astype(np.uint8)
    labels[9] = 11
    sf.write_idx(tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte", labels)
    with pytest.raises(ValueError, match=r"t10k-labels-idx1-ubyte: label 11 at index 9"):
        open_files("mnist", str(tmp_path), 5, partition="iid")


# ------------------------------------------------------------------------- LEAF text
NAMES = ["caf\u00e9_writer", "\u4e2d\u6587", "emoji \U0001F600", "quote\"back\\slash", "plain"]


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_leaf_user_ids_of_any_escaping_read_back(tmp_path, rng, ensure_ascii):
    users = sf.femnist_users(rng, [4, 3, 5, 2, 3])
    users = {name: users[u] for name, u in zip(NAMES, users)}
    data = sf.split_users(rng, users)
    sf.write_leaf(tmp_path, data, per_file=2, ensure_ascii=ensure_ascii)
    raw = b"".join(p.read_bytes() for p in (tmp_path / "train").glob("*.json"))
    assert (b"\\u00e9" in raw) == ensure_ascii
    d = open_files("femnist", str(tmp_path))
    assert d.users == NAMES and count_clients("femnist", str(tmp_path)) == 5
    for split in ("train", "test"):
        batch = d.client_data(np.arange(5), split)
        for k, name in enumerate(NAMES):
            rows = slice(int(batch.offsets[k]), int(batch.offsets[k + 1]))
            assert batch.y[rows].tolist() == data[split][name]["y"]


@pytest.mark.parametrize("ensure_ascii", [True, False])
def test_leaf_json_entries_with_non_ascii_text_read_back(tmp_path, rng, ensure_ascii):
    users = sf.sent140_users(rng, [3, 4])
    users = {"\u00fcser\u00e9": users["user0"], "\u4e2d": users["user1"]}
    for entry in users.values():
        for row in entry["x"]:
            row[4] += " caf\u00e9 \U0001F600"
    sf.write_leaf(tmp_path, {"train": users, "test": users}, ensure_ascii=ensure_ascii)
    d = open_files("sent140", str(tmp_path))
    assert d.users == list(users)
    assert d.client_data([1]).counts.tolist() == [4]


def test_leaf_files_that_are_not_utf8_json_name_the_file(tmp_path):
    path = tmp_path / "f.json"
    path.write_bytes(b'{"users": ["caf\xe9"], "num_samples": [1], "user_data": '
                     b'{"caf\xe9": {"x": [[0.0]], "y": [0]}}}')
    with pytest.raises(ValueError, match=f"{path}.*UTF-8"):
        LeafFile(str(path))


# -------------------------------------------------------------------------- named pipes
def _fifo(path):
    if path.exists():
        path.unlink()
    os.mkfifo(path)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_named_pipes_in_place_of_data_files_are_refused_not_read(tmp_path, rng, no_hang):
    leaf = tmp_path / "leaf"
    sf.write_leaf(leaf, sf.split_users(rng, sf.femnist_users(rng, [3, 4, 5])), per_file=2)
    pipe = sorted((leaf / "train").glob("*.json"))[1]
    _fifo(pipe)
    with pytest.raises(ValueError, match=f"{pipe} is not a regular file"):
        open_files("femnist", str(leaf))
    npz = tmp_path / "npz"
    sf.write_npz_clients(npz, rng, [4, 5])
    _fifo(npz / "client_001.npz")
    with pytest.raises(ValueError, match="client_001.npz is not a regular file"):
        open_files("npz-clients", str(npz))
    sf.write_mnist(tmp_path / "m", "MNIST", rng)
    _fifo(tmp_path / "m" / "MNIST" / "raw" / "train-images-idx3-ubyte")
    with pytest.raises(ValueError, match="train-images-idx3-ubyte is not a regular file"):
        open_files("mnist", str(tmp_path / "m"), 5)
    sf.write_cifar(tmp_path / "c", rng)
    _fifo(tmp_path / "c" / "cifar-10-batches-py" / "test_batch")
    with pytest.raises(ValueError, match="test_batch is not a regular file"):
        open_files("cifar10", str(tmp_path / "c"), 5)
    with pytest.raises(ValueError, match="test_batch is not a regular file"):
        read_cifar_batch(str(tmp_path / "c" / "cifar-10-batches-py" / "test_batch"), "labels")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_celeba_images_that_are_pipes_broken_or_outside_the_folder_are_refused(tmp_path, rng,
                                                                               no_hang):
    images = tmp_path / "raw" / "img_align_celeba"
    data = sf.split_users(rng, sf.celeba_users(rng, [3, 4, 3], images))
    sf.write_leaf(tmp_path, data)
    d = open_files("celeba", str(tmp_path))
    names = data["train"]["101"]["x"]
    _fifo(images / names[1])
    with pytest.raises(ValueError, match=f"user '101' in .*json \\(client 1\\): .*{names[1]} "
                                         "is not a regular file"):
        d.client_data([1])
    (images / data["train"]["102"]["x"][0]).write_bytes(b"\xff\xd8 not a jpeg")
    with pytest.raises(ValueError, match="is not a readable image"):
        d.client_data([2])
    data["train"]["100"]["x"][0] = "../../../etc/passwd"
    sf.write_leaf(tmp_path / "escape", data)
    (tmp_path / "escape" / "raw").symlink_to(tmp_path / "raw")
    with pytest.raises(ValueError, match="is not a file name in"):
        open_files("celeba", str(tmp_path / "escape")).client_data([0])


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes are POSIX")
def test_named_pipes_in_place_of_run_files_are_refused(tmp_path, no_hang):
    _fifo(tmp_path / "checkpoint.pt")
    with pytest.raises(ValueError, match="checkpoint.pt is not a regular file"):
        checkpoint.load(tmp_path / "checkpoint.pt")
    _fifo(tmp_path / "config.json")
    with pytest.raises(ValueError, match="config.json is not a regular file"):
        files.read_regular_file(tmp_path / "config.json", "run configuration")
    with pytest.raises(ValueError, match="config.json is not a regular file"):
        files.check_regular_file(tmp_path / "config.json")
    os.mkdir(tmp_path / "dir.json")
    with pytest.raises(ValueError, match="dir.json is not a regular file .*directory"):
        files.read_json_file(tmp_path / "dir.json", "run configuration")
    with pytest.raises(ValueError, match="missing.json does not exist"):
        files.read_regular_file(tmp_path / "missing.json", "run configuration")
    (tmp_path / "ok.json").write_text('{"a": [1, "\\u00e9"]}')
    assert files.read_json_file(tmp_path / "ok.json", "run configuration") == {
        "a": [1, "\u00e9"]}
    (tmp_path / "deep.json").write_text("[" * 100000 + "]" * 100000)
    with pytest.raises(ValueError, match="deep.json .*nested too deeply"):
        files.read_json_file(tmp_path / "deep.json", "run configuration")
    (tmp_path / "latin.json").write_bytes(b'{"a": "caf\xe9"}')
    with pytest.raises(ValueError, match="latin.json .*UTF-8"):
        files.read_json_file(tmp_path / "latin.json", "run configuration")


# ---------------------------------------------------------------------- NaN and inf
def test_npz_nan_and_inf_name_file_field_and_sample(tmp_path, rng):
    sf.write_npz_clients(tmp_path, rng, [6, 5])
    x = rng.normal(size=(6, 6)).astype(np.float32)
    x[3, 2] = np.nan
    np.savez(tmp_path / "client_000.npz", x=x, y=np.zeros(6, np.int64),
             x_test=np.ones((2, 6), np.float32), y_test=np.zeros(2, np.int64))
    xt = np.ones((3, 6), np.float32)
    xt[1, 0] = -np.inf
    np.savez(tmp_path / "client_001.npz", x=np.ones((4, 6), np.float32), y=np.zeros(4, np.int64),
             x_test=xt, y_test=np.zeros(3, np.int64))
    d = open_files("npz-clients", str(tmp_path))
    with pytest.raises(ValueError, match=r"client_000.npz \(client 0\): x has NaN at sample 3"):
        d.client_data([0])
    assert d.client_data([1]).counts.tolist() == [4]
    with pytest.raises(ValueError, match=r"client_001.npz \(client 1\): x_test has inf at "
                                         "sample 1"):
        d.client_data([1], "test")


def test_npz_without_test_names_the_row_of_x(tmp_path, rng):
    x = np.ones((10, 3), np.float64)
    x[9, 1] = np.nan           # the last row: in the test part of the 80/20 split
    np.savez(tmp_path / "a.npz", x=x, y=np.zeros(10, np.int64))
    d = open_files("npz-clients", str(tmp_path))
    assert d.client_data([0]).counts.tolist() == [8]
    with pytest.raises(ValueError, match="a.npz .*x has NaN at sample 9"):
        d.client_data([0], "test")
    np.savez(tmp_path / "a.npz", x=np.full((4, 3), 1e39), y=np.zeros(4, np.int64))
    with pytest.raises(ValueError, match="x has inf at sample 0"):   # inf once float32
        open_files("npz-clients", str(tmp_path)).client_data([0])


def test_leaf_nan_and_inf_pixels_name_file_user_and_sample(tmp_path, rng):
    data = sf.split_users(rng, sf.femnist_users(rng, [5, 6]))
    user = list(data["train"])[1]
    data["train"][user]["x"][2][100] = float("nan")
    data["test"][user]["x"][0][5] = float("inf")
    sf.write_leaf(tmp_path, data)
    d = open_files("femnist", str(tmp_path))
    d.client_data([0])
    with pytest.raises(ValueError, match=f"user {user!r} .*train.*json.*: x has NaN at "
                                         "sample 2"):
        d.client_data([1])
    with pytest.raises(ValueError, match=f"user {user!r} .*test.*json.*: x has inf at "
                                         "sample 0"):
        d.client_data([1], "test")


def test_array_dataset_refuses_nan_and_inf_features():
    x = np.ones((5, 3))
    bad = x.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"train\[1\]: x has NaN at sample 2"):
        ArrayDataset([(x, [0] * 5), (bad, [1] * 5)])
    with pytest.raises(ValueError, match=r"test\[0\]: x has inf at sample 0"):
        ArrayDataset([(x, [0] * 5)], test=[(np.full((1, 3), 1e300), [0])])


def test_checkpoint_with_a_nan_model_is_refused_naming_the_field(tmp_path):
    params = torch.zeros(10)
    params[7] = float("nan")
    checkpoint.save(tmp_path / "c.pt", {"config": {}, "current": {"params": params},
                                        "history": [{"acc_mean_acf1": float("nan")}],
                                        "finals": {"fedavg": np.full(3, np.nan)}})
    with pytest.raises(ValueError, match=r"c.pt: current\.params has NaN at index 7"):
        checkpoint.load(tmp_path / "c.pt")
    checkpoint.save(tmp_path / "d.pt", {"models": {"fedavg": {"w": torch.full((2, 2), -np.inf)}},
                                        "finals": {"fedavg": np.full(3, np.nan)}})
    with pytest.raises(ValueError, match=r"d.pt: models\.fedavg\.w has inf"):
        checkpoint.load(tmp_path / "d.pt")
    (tmp_path / "f.pt").write_bytes(sf.deep_checkpoint(50000))     # lists 50000 deep
    with pytest.raises(ValueError, match="f.pt is not a fastfair checkpoint: it is nested too "
                                         "deeply"):
        checkpoint.load(tmp_path / "f.pt")
    # NaN where a run may keep one (an undefined metric) stays readable.
    checkpoint.save(tmp_path / "e.pt", {"current": {"params": torch.ones(3)},
                                        "finals": {"fedavg": np.full(3, np.nan)}})
    assert np.isnan(checkpoint.load(tmp_path / "e.pt")["finals"]["fedavg"]).all()


# ------------------------------------------------------------ broken and huge files
def test_truncated_and_foreign_npz_files_name_the_file(tmp_path, rng):
    sf.write_npz_clients(tmp_path, rng, [30, 20])
    path = tmp_path / "client_001.npz"
    whole = path.read_bytes()
    for cut in (len(whole) // 2, len(whole) - 30, 10):
        path.write_bytes(whole[:cut])
        with pytest.raises(ValueError, match="client_001.npz"):
            open_files("npz-clients", str(tmp_path))
    path.write_bytes(b"not a zip at all")
    with pytest.raises(ValueError, match="client_001.npz"):
        open_files("npz-clients", str(tmp_path))
    np.savez(path, x=np.array([{"a": 1}] * 3, dtype=object), y=np.zeros(3, np.int64))
    with pytest.raises(ValueError, match="client_001.npz"):
        open_files("npz-clients", str(tmp_path))


def test_npz_damaged_inside_a_member_names_the_file_when_read(tmp_path, rng):
    sf.write_npz_clients(tmp_path, rng, [30, 20], with_test=False)
    path = tmp_path / "client_001.npz"
    with zipfile.ZipFile(path) as zf:
        members = {n: zf.read(n) for n in zf.namelist()}
    x = bytearray(members["x.npy"])
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr("y.npy", members["y.npy"])
        zf.writestr("x.npy", bytes(x))
    raw = bytearray(path.read_bytes())
    at = raw.index(b"x.npy") + 5 + 60       # inside x's compressed data (local entry)
    raw[at:at + 40] = bytes(40)
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="client_001.npz"):
        open_files("npz-clients", str(tmp_path)).client_data([1])


def test_npz_huge_declared_sizes_are_refused_before_reading(tmp_path, rng):
    sf.write_npz_clients(tmp_path, rng, [4], with_test=False)
    path = tmp_path / "client_000.npz"
    with zipfile.ZipFile(path) as zf:
        y = zf.read("y.npy")
    header = {"descr": "<f4", "fortran_order": False, "shape": (10 ** 12, 6)}
    x = sf.npy_bytes(header, b"\0" * 96)
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("x.npy", x)
        zf.writestr("y.npy", y)
    with pytest.raises(ValueError, match=r"client_000.npz: x declares .*\[1000000000000, 6\]"):
        open_files("npz-clients", str(tmp_path))
    # A zip entry claiming a huge uncompressed size.
    np.savez_compressed(path, x=np.zeros((4, 6), np.float32), y=np.zeros(4, np.int64))
    sf.patch_zip_sizes(path, "x.npy", 10 ** 9 * 4)
    with pytest.raises(ValueError, match="client_000.npz: .*x.npy"):
        open_files("npz-clients", str(tmp_path)).client_data([0])


def test_truncated_and_foreign_cifar_pickles_name_the_file(tmp_path, rng):
    sf.write_cifar(tmp_path, rng)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    whole = path.read_bytes()
    for payload in (whole[:len(whole) // 2], whole[:3], b"", b"garbage\n",
                    pickle.dumps([1, 2, 3], protocol=2),
                    pickle.dumps({"data": np.zeros((2, 3072), np.uint8)}, protocol=2),
                    pickle.dumps({"data": "text", "labels": [0]}, protocol=2),
                    # BINBYTES8 declaring 2**60 bytes
                    b"\x80\x04\x8e" + struct.pack("<Q", 1 << 60) + b"abc"):
        path.write_bytes(payload)
        with pytest.raises(ValueError, match="test_batch"):
            read_cifar_batch(str(path), "labels")
        with pytest.raises(ValueError, match="test_batch"):
            open_files("cifar10", str(tmp_path), 5)


def test_cifar_code_is_still_refused_and_the_refusal_names_the_file(tmp_path):
    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))
    path = tmp_path / "test_batch"
    path.write_bytes(pickle.dumps({"data": Evil(), "labels": []}, protocol=2))
    with pytest.raises(pickle.UnpicklingError, match="test_batch: refusing to load"):
        read_cifar_batch(str(path), "labels")
    with pytest.raises(ValueError, match="refusing to load .*system"):
        read_cifar_batch(str(path), "labels")


@pytest.mark.parametrize("compress", [False, True])
def test_idx_headers_declaring_more_than_the_file_holds(tmp_path, compress):
    header = bytes([0, 0, 8, 2]) + struct.pack(">II", 10 ** 6, 10 ** 6)     # 10**12 items
    body = header + bytes(100)
    path = tmp_path / ("img.gz" if compress else "img")
    path.write_bytes(gzip.compress(body) if compress else body)
    with pytest.raises(ValueError, match=r"img.*header declares \[1000000, 1000000\]"):
        read_idx(str(path))
    header = bytes([0, 0, 8, 3]) + struct.pack(">III", 2 ** 32 - 1, 2 ** 32 - 1, 2 ** 32 - 1)
    path.write_bytes(gzip.compress(header) if compress else header)
    with pytest.raises(ValueError, match="img.*header declares"):
        read_idx(str(path))
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 3, 0, 0])) if compress
                     else bytes([0, 0, 8, 3, 0, 0]))            # sizes cut off
    with pytest.raises(ValueError, match="img.*header"):
        read_idx(str(path))
    if compress:
        path.write_bytes(gzip.compress(bytes([0, 0, 8, 1]) + struct.pack(">I", 50)
                                       + bytes(50))[:-12])      # gzip stream cut off
        with pytest.raises(ValueError, match="img.gz"):
            read_idx(str(path))


def test_deeply_nested_and_huge_leaf_json_name_the_file(tmp_path):
    deep = "[" * 100000 + "]" * 100000
    path = tmp_path / "h.json"
    path.write_text('{"users": ' + deep + ', "num_samples": [], "user_data": {}}')
    with pytest.raises(ValueError, match="h.json.*nested too deeply"):
        LeafFile(str(path))
    path.write_text(json.dumps({"users": ["u"], "num_samples": [10 ** 30], "user_data": {
        "u": {"x": [[0.0]], "y": [0]}}}))
    with pytest.raises(ValueError, match="h.json.*num_samples"):
        LeafFile(str(path))
    path.write_text(json.dumps({"users": ["u"], "num_samples": [10 ** 12], "user_data": {
        "u": {"x": [[0.0]], "y": [0]}}}))
    with pytest.raises(ValueError, match="h.json.*num_samples"):
        LeafFile(str(path))
    path.write_text(json.dumps({"users": ["u"], "num_samples": [1.5], "user_data": {}}))
    with pytest.raises(ValueError, match="h.json.*num_samples"):
        LeafFile(str(path))
    (tmp_path / "train").mkdir()
    (tmp_path / "test").mkdir()
    for split in ("train", "test"):
        (tmp_path / split / "a.json").write_text(
            '{"users": ["u"], "num_samples": [1], "user_data": {"u": {"x": [' + deep
            + '], "y": [0]}}}')  # deeper than any Python's parser goes (3.12 parses 2000)
    d = open_files("sent140", str(tmp_path))
    with pytest.raises(ValueError, match="a.json.*nested too deeply"):
        d.client_data([0])
    d = open_files("femnist", str(tmp_path))
    with pytest.raises(ValueError, match="a.json"):
        d.client_data([0])


# ----------------------------------------------------------------------- empty clients
def test_an_empty_client_is_named_with_its_file(tmp_path, rng):
    sf.write_npz_clients(tmp_path, rng, [4, 5, 6], with_test=False)
    np.savez(tmp_path / "client_001.npz", x=np.zeros((0, 6), np.float32),
             y=np.zeros(0, np.int64))
    with pytest.raises(ValueError, match=r"client_001.npz \(client 1\) has no training "
                                         "samples"):
        open_files("npz-clients", str(tmp_path))


def test_an_empty_leaf_user_is_named_with_its_file(tmp_path, rng):
    data = sf.split_users(rng, sf.femnist_users(rng, [3, 4, 5]))
    user = list(data["train"])[2]
    data["train"][user] = {"x": [], "y": []}
    sf.write_leaf(tmp_path, data, per_file=2)
    with pytest.raises(ValueError, match=f"user {user!r} .*all_data_1.*json \\(client 2\\) has "
                                         "no training samples"):
        open_files("femnist", str(tmp_path))


def test_an_empty_array_client_is_named():
    x = np.ones((5, 3))
    with pytest.raises(ValueError, match=r"train\[1\] \(client 1\) has no training samples"):
        ArrayDataset([(x, [0] * 5), (x[:0], [])])
    with pytest.raises(ValueError, match=r"train\[0\] \(client 0\) has no training samples"):
        ArrayDataset([(x[:0], [])], test=[(x, [0] * 5)])


def test_femnist_pixels_of_0_to_255_are_refused_naming_sample_and_pixel(tmp_path, rng):
    data = sf.split_users(rng, sf.femnist_users(rng, [5, 6]))
    user = list(data["train"])[0]
    data["train"][user]["x"][1] = [float(round(v * 255)) for v in data["train"][user]["x"][1]]
    sf.write_leaf(tmp_path, data)
    d = open_files("femnist", str(tmp_path))
    with pytest.raises(ValueError, match=rf"user {user!r} .*: pixels must lie in \[0, 1\].*"
                                         r"sample 1 has .* at pixel .*divide 0-255 pixels by 255"):
        d.client_data([0])


def test_a_leaf_user_key_repeated_in_user_data_is_refused(tmp_path, rng):
    path = tmp_path / "train.json"
    path.write_text('{"users": ["a", "b"], "num_samples": [1, 1], "user_data": {'
                    '"a": {"x": [[0.5]], "y": [1]}, "a": {"x": [[0.25]], "y": [2]}, '
                    '"b": {"x": [[0.0]], "y": [3]}}}')
    with pytest.raises(ValueError, match=r"train.json: 'user_data' holds user 'a' twice"):
        LeafFile(str(path)).numeric_entry(1)
