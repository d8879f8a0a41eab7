"""image-folder read from small PNG and JPEG files: both layouts, greyscale and colour, the
cache of decoded arrays, and the errors that name the file."""

from __future__ import annotations

import os

import numpy as np
import pytest

from fastfair.sim.data.image_folder import ImageFolder, list_images, load_image_folder


def _write(folder, per_class, rng, size=(6, 5), mode="RGB", suffix=".png"):
    from PIL import Image

    pixels = {}
    for c, n in per_class.items():
        (folder / c).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            shape = (size[1], size[0], 3) if mode == "RGB" else (size[1], size[0])
            array = rng.integers(0, 256, shape, dtype=np.uint8)
            Image.fromarray(array, mode).save(folder / c / f"{i:03d}{suffix}")
            pixels[f"{c}/{i:03d}"] = array
    (folder / next(iter(per_class)) / "Thumbs.db").write_bytes(b"not an image")
    return pixels


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("FASTFAIR_CACHE_DIR", str(tmp_path / "cache"))


def test_train_and_test_folders_read_pixel_exact_png(tmp_path, rng):
    train = _write(tmp_path / "imgs" / "train", {"cat": 6, "dog": 4}, rng)
    _write(tmp_path / "imgs" / "test", {"dog": 2}, rng)
    data = ImageFolder(str(tmp_path / "imgs"), 2, partition="iid")
    assert data.classes == ["cat", "dog"] and data.sample_shape == (3, 5, 6)
    np.testing.assert_array_equal(data.images["train"][0], train["cat/000"].transpose(2, 0, 1))
    np.testing.assert_array_equal(data.labels["train"], [0] * 6 + [1] * 4)
    assert data.num_samples(np.arange(2)).sum() == 10
    assert data.client_data(np.arange(2), "test").counts.sum() == 2


def test_one_folder_is_split_per_class_and_greyscale_keeps_one_channel(tmp_path, rng):
    _write(tmp_path, {"a": 10, "b": 5}, rng, mode="L")
    classes, files, _ = list_images(str(tmp_path))
    assert [len(files[s][0]) for s in ("train", "test")] == [8 + 4, 2 + 1]
    data = ImageFolder(str(tmp_path), 3, partition="iid")
    assert data.sample_shape == (1, 5, 6) and data.num_classes == 2


def test_decoded_arrays_are_cached_and_refreshed_when_an_image_changes(tmp_path, rng, caplog):
    _write(tmp_path / "imgs", {"a": 5, "b": 5}, rng, suffix=".jpg")
    with caplog.at_level("INFO", logger="fastfair.sim.data"):
        first = load_image_folder(str(tmp_path / "imgs"))[1]["train"]
        again = load_image_folder(str(tmp_path / "imgs"))[1]["train"]
    assert sum("decoded 10 images" in r.getMessage() for r in caplog.records) == 1
    assert isinstance(again, np.memmap)
    np.testing.assert_array_equal(first, again)
    _write(tmp_path / "imgs", {"a": 1}, rng, suffix=".jpg")            # a.000 rewritten
    stat = os.stat(tmp_path / "imgs" / "a" / "000.jpg")
    os.utime(tmp_path / "imgs" / "a" / "000.jpg", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    changed = load_image_folder(str(tmp_path / "imgs"))[1]["train"]
    assert not np.array_equal(changed, first)
    assert sorted(os.listdir(tmp_path / "imgs")) == ["a", "b"]


def test_errors_name_the_image_and_the_fix(tmp_path, rng):
    with pytest.raises(ValueError, match="holds no class subfolders with images"):
        list_images(str(tmp_path))
    _write(tmp_path / "sizes", {"a": 3}, rng)
    _write(tmp_path / "sizes", {"b": 3}, rng, size=(4, 4))
    with pytest.raises(ValueError, match=r"b/000.png is 4x4 but .*a/000.png is 6x5.*resize"):
        load_image_folder(str(tmp_path / "sizes"), cache=False)
    _write(tmp_path / "bad", {"a": 3}, rng)
    (tmp_path / "bad" / "a" / "001.png").write_bytes(b"\x89PNG broken")
    with pytest.raises(ValueError, match=r"a/001.png is not a readable image"):
        load_image_folder(str(tmp_path / "bad"), cache=False)
    _write(tmp_path / "two" / "train", {"a": 3}, rng)
    _write(tmp_path / "two" / "test", {"z": 1}, rng)
    with pytest.raises(ValueError, match=r"test/z holds test images of a class with no training"):
        list_images(str(tmp_path / "two"))


def test_16_bit_greyscale_is_scaled_not_clipped(tmp_path):
    from PIL import Image

    wide = (np.arange(30, dtype=np.uint16).reshape(5, 6) * 2200)
    for c in ("a", "b"):
        (tmp_path / c).mkdir()
        for i in range(2):
            Image.fromarray(wide).save(tmp_path / c / f"{i}.png")
    images = load_image_folder(str(tmp_path), cache=False)[1]["train"]
    expected = np.floor(wide.astype(np.float64) * 255 / 65535 + 0.5).astype(np.uint8)
    np.testing.assert_array_equal(images[0, 0], expected)


def test_32_bit_pixels_are_refused_naming_the_image(tmp_path):
    import io

    from PIL import Image

    (tmp_path / "a").mkdir()
    Image.fromarray(np.full((5, 6), 200, np.uint8)).save(tmp_path / "a" / "0.png")
    tiff = io.BytesIO()
    Image.fromarray(np.full((5, 6), 70000, np.int32), "I").save(tiff, format="TIFF")
    (tmp_path / "a" / "1.png").write_bytes(tiff.getvalue())   # read by content, not by name
    with pytest.raises(ValueError, match=r"a/1.png holds 32-bit integer pixels"):
        load_image_folder(str(tmp_path), cache=False)


@pytest.mark.parametrize("tamper", ["pixels", "size"])
def test_a_changed_cache_is_decoded_again(tmp_path, rng, caplog, tamper):
    pixels = _write(tmp_path / "imgs", {"a": 4, "b": 4}, rng)
    load_image_folder(str(tmp_path / "imgs"))
    (cached,) = (tmp_path / "cache" / "image-folder").iterdir()
    train = np.load(cached / "train.npy")
    np.save(cached / "train.npy", 255 - train if tamper == "pixels" else train[:, :, :4, :4])
    with caplog.at_level("WARNING", logger="fastfair.sim.data"):
        again = load_image_folder(str(tmp_path / "imgs"))[1]["train"]
    assert any("differ from those decoded" in r.getMessage() for r in caplog.records)
    np.testing.assert_array_equal(again[0], pixels["a/000"].transpose(2, 0, 1))
    assert isinstance(load_image_folder(str(tmp_path / "imgs"))[1]["train"], np.memmap)
