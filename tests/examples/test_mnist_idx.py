"""The IDX reader and MNIST file discovery of the mnist-ddp demo (examples/mnist-ddp/train.py)."""

from __future__ import annotations

import gzip
import importlib.util
import struct
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

pytest.importorskip("torch")

TRAIN_PY = Path(__file__).resolve().parents[2] / "examples" / "mnist-ddp" / "train.py"


def _load_train() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mnist_ddp_train", TRAIN_PY)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


train = _load_train()


def idx_bytes(array: np.ndarray, type_code: int = 0x08) -> bytes:
    """Encode ``array`` as IDX: magic 00 00 type ndim, big-endian uint32 dims, big-endian data."""
    dtype = {0x08: ">u1", 0x0C: ">i4", 0x0D: ">f4"}[type_code]
    header = bytes([0, 0, type_code, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(dtype).tobytes()


def write(path: Path, data: bytes) -> Path:
    if path.suffix == ".gz":
        with gzip.open(path, "wb") as f:
            f.write(data)
    else:
        path.write_bytes(data)
    return path


@pytest.mark.parametrize("name", ["images-idx3-ubyte", "images-idx3-ubyte.gz"])
def test_reads_uint8_images_plain_and_gzip(tmp_path: Path, name: str) -> None:
    images = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4) * 10
    path = write(tmp_path / name, idx_bytes(images))

    got = train.read_idx(path)

    assert got.dtype == np.uint8
    assert got.shape == (2, 3, 4)
    np.testing.assert_array_equal(got, images)
    got[0, 0, 0] = 1  # a writable copy, not a view of a read-only buffer


def test_reads_labels_from_a_string_path(tmp_path: Path) -> None:
    labels = np.array([7, 2, 1, 0, 4], dtype=np.uint8)
    path = write(tmp_path / "labels-idx1-ubyte", idx_bytes(labels))

    np.testing.assert_array_equal(train.read_idx(str(path)), labels)


def test_multibyte_types_are_big_endian(tmp_path: Path) -> None:
    ints = np.array([[1, -2], [70000, 3]], dtype=np.int32)
    floats = np.array([0.5, -1.25], dtype=np.float32)
    got_ints = train.read_idx(write(tmp_path / "ints", idx_bytes(ints, 0x0C)))
    got_floats = train.read_idx(write(tmp_path / "floats", idx_bytes(floats, 0x0D)))

    np.testing.assert_array_equal(got_ints, ints)
    np.testing.assert_array_equal(got_floats, floats)
    assert got_ints.dtype.isnative and got_floats.dtype.isnative


@pytest.mark.parametrize("suffix", ["", ".gz"])
def test_bad_magic_number_is_a_clear_error(tmp_path: Path, suffix: str) -> None:
    data = bytearray(idx_bytes(np.zeros((2, 2), dtype=np.uint8)))
    data[0:2] = b"\x12\x34"
    path = write(tmp_path / f"bad{suffix}", bytes(data))

    with pytest.raises(ValueError, match=r"not an IDX file \(bad magic number 12340802\)") as err:
        train.read_idx(path)
    assert str(path) in str(err.value)


def test_unknown_type_code_is_rejected(tmp_path: Path) -> None:
    path = write(tmp_path / "odd", bytes([0, 0, 0x42, 1]) + struct.pack(">I", 1) + b"\x00")

    with pytest.raises(ValueError, match="bad magic number"):
        train.read_idx(path)


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"", "bad magic number empty"),
        (bytes([0, 0, 0x08, 3]) + struct.pack(">I", 5), "truncated IDX header"),
        (idx_bytes(np.zeros((2, 3), dtype=np.uint8))[:-1], "5 bytes but dims \\(2, 3\\) need 6"),
        (idx_bytes(np.zeros((2, 3), dtype=np.uint8)) + b"\x00", "7 bytes"),
    ],
)
def test_malformed_files_are_rejected(tmp_path: Path, data: bytes, message: str) -> None:
    path = write(tmp_path / "broken", data)

    with pytest.raises(ValueError, match=message):
        train.read_idx(path)


def test_find_mnist_prefers_plain_files_and_accepts_gzip(tmp_path: Path) -> None:
    assert train.find_mnist(tmp_path) is None
    names = list(train.MNIST_FILES)
    for name in names[:2]:
        (tmp_path / name).write_bytes(b"")
    for name in names[1:]:
        (tmp_path / f"{name}.gz").write_bytes(b"")

    found = train.find_mnist(tmp_path)

    assert found is not None
    assert [p.name for p in found] == [names[0], names[1], names[2] + ".gz", names[3] + ".gz"]


def test_load_data_reads_an_mnist_directory(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(6, 28, 28), dtype=np.uint8)
    labels = np.arange(6, dtype=np.uint8)
    tr_img, tr_lbl, te_img, te_lbl = train.MNIST_FILES
    write(tmp_path / f"{tr_img}.gz", idx_bytes(images))
    write(tmp_path / tr_lbl, idx_bytes(labels))
    write(tmp_path / te_img, idx_bytes(images[:2]))
    write(tmp_path / f"{te_lbl}.gz", idx_bytes(labels[:2]))

    name, train_set, test_set = train.load_data(str(tmp_path))

    assert name == "mnist"
    x, y = train_set.tensors
    assert tuple(x.shape) == (6, 28, 28) and tuple(test_set.tensors[0].shape) == (2, 28, 28)
    assert float(x.max()) <= 1.0 and float(x.min()) >= 0.0
    np.testing.assert_allclose(x.numpy(), images / 255.0, rtol=1e-6)
    assert y.tolist() == list(range(6))


def test_load_data_falls_back_to_bundled_digits(tmp_path: Path) -> None:
    pytest.importorskip("sklearn")
    name, train_set, test_set = train.load_data(str(tmp_path))  # empty: no MNIST here

    assert name == "digits-8x8"
    assert len(train_set) + len(test_set) == 1797
    assert tuple(train_set.tensors[0].shape[1:]) == (8, 8)
    assert sorted(set(test_set.tensors[1].tolist())) == list(range(10))
