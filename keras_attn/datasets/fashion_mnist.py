"""Fashion-MNIST, read from the IDX files of `dataset-fashion-mnist`."""

import gzip
import math
import os

import numpy as np

from keras_attn.datasets._utils import TrainTestSplit, check_limit
from keras_attn.datasets.errors import DatasetNotFoundError

DEFAULT_DIR = "/usr/share/datasets/fashion-mnist"
"""Folder where `apt-get install dataset-fashion-mnist` puts the files."""

CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
"""Names of the 10 Fashion-MNIST classes, indexed by label."""

_FILES = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte"),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"),
}

# IDX type code (third magic byte) -> big-endian numpy dtype.
_IDX_DTYPES = {
    0x08: np.dtype("u1"),
    0x09: np.dtype("i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

IDX_IMAGES_MAGIC = 0x00000803
"""Magic number of an IDX file of unsigned bytes with 3 dimensions."""

IDX_LABELS_MAGIC = 0x00000801
"""Magic number of an IDX file of unsigned bytes with 1 dimension."""


def read_idx(path, expected_magic=None, limit=None):
    """Reads an IDX file (as used by MNIST and Fashion-MNIST) into numpy.

    The file may be gzip-compressed (name ending in `.gz`) or raw. An IDX file
    starts with a 4-byte big-endian magic number: two zero bytes, a type code
    (`0x08` for unsigned bytes) and the number of dimensions. Each dimension
    size follows as a big-endian 32-bit integer, then the data in C order.

    Args:
        path: path to the file.
        expected_magic: optional int. When given, the file's magic number
            must equal it (e.g. `0x00000803` for uint8 images of shape
            `(N, rows, cols)`).
        limit: optional positive int. Read only the first `limit` items
            along the first dimension (the rest of the file is not read).

    Returns:
        A numpy array with the file's dtype (converted to native byte order)
        and shape.

    Raises:
        ValueError: if the file is not a valid IDX file, has an unexpected
            magic number, or is truncated.

    Example:

    ```python
    labels = read_idx("train-labels-idx1-ubyte.gz", expected_magic=0x801)
    ```
    """
    limit = check_limit(limit)
    path = os.fspath(path)
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        header = f.read(4)
        if len(header) != 4:
            raise ValueError(f"Not an IDX file (too short): {path}")
        magic = int.from_bytes(header, "big")
        if expected_magic is not None and magic != expected_magic:
            raise ValueError(
                f"Bad IDX magic number in {path}: expected "
                f"0x{expected_magic:08X}, found 0x{magic:08X}."
            )
        if header[0] != 0 or header[1] != 0 or header[2] not in _IDX_DTYPES:
            raise ValueError(f"Not an IDX file (magic number 0x{magic:08X}): {path}")
        dtype = _IDX_DTYPES[header[2]]
        ndim = header[3]
        raw_dims = f.read(4 * ndim)
        if len(raw_dims) != 4 * ndim:
            raise ValueError(f"Truncated IDX header: {path}")
        shape = [int.from_bytes(raw_dims[4 * i : 4 * i + 4], "big") for i in range(ndim)]
        if ndim and limit is not None:
            shape[0] = min(shape[0], limit)
        nbytes = math.prod(shape) * dtype.itemsize
        data = f.read(nbytes)
        if len(data) != nbytes:
            raise ValueError(
                f"Truncated IDX file {path}: expected {nbytes} data bytes "
                f"for shape {tuple(shape)}, found {len(data)}."
            )
        if limit is None and f.read(1):
            raise ValueError(
                f"IDX file {path} has more data than its header declares (shape {tuple(shape)})."
            )
    array = np.frombuffer(data, dtype=dtype).reshape(shape)
    return array.astype(dtype.newbyteorder("="), copy=True)


def _find(directory, name):
    for candidate in (name + ".gz", name):
        full = os.path.join(directory, candidate)
        if os.path.isfile(full):
            return full
    return None


def _not_found_message(directory, missing, user_path):
    names = ", ".join(n + ".gz" for pair in _FILES.values() for n in pair)
    where = "the given `path`" if user_path else "the default location"
    return (
        f"Fashion-MNIST was not found in {where} {directory!r} "
        f"(missing: {', '.join(missing)}). keras_attn never downloads data. "
        "Install it with `sudo apt-get install dataset-fashion-mnist` "
        f"(Debian/Ubuntu; it installs the files into {DEFAULT_DIR}), or pass "
        f"`path=` pointing to a folder that holds {names} "
        "(gzip-compressed or not)."
    )


def load_fashion_mnist(
    path: str | os.PathLike | None = None, limit: int | None = None
) -> TrainTestSplit:
    """Loads Fashion-MNIST from locally installed IDX files.

    Fashion-MNIST (Xiao et al. 2017, MIT licence) has 60,000 training and
    10,000 test grayscale images of 28x28 pixels in 10 classes of clothing
    (see `CLASS_NAMES` in this module). Nothing is downloaded: by default
    the files come from the Debian package `dataset-fashion-mnist`, which
    installs them into `/usr/share/datasets/fashion-mnist`.

    Args:
        path: optional folder holding `train-images-idx3-ubyte.gz`,
            `train-labels-idx1-ubyte.gz`, `t10k-images-idx3-ubyte.gz` and
            `t10k-labels-idx1-ubyte.gz` (each file may also be stored
            uncompressed, without `.gz`). Defaults to
            `/usr/share/datasets/fashion-mnist`.
        limit: optional positive int. Keep only the first `limit` samples
            of each split (only those bytes are decompressed, which is
            faster for quick experiments and tests).

    Returns:
        `((x_train, y_train), (x_test, y_test))`, 60,000 and 10,000 examples
        (or the first `limit` of each): uint8 images `(n, 28, 28)` in
        `[0, 255]` and their uint8 labels `(n,)` in `[0, 9]`.

    Raises:
        DatasetNotFoundError: if the files are missing. The message says
            how to install them.
        ValueError: if `limit` is invalid or a file is not a valid IDX file.

    Example:

    ```python
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist()
    x_train.shape  # (60000, 28, 28)
    (x_small, _), _ = load_fashion_mnist(limit=512)
    x_small.shape  # (512, 28, 28)
    ```
    """
    limit = check_limit(limit)
    directory = DEFAULT_DIR if path is None else os.fspath(path)
    found, missing = {}, []
    for pair in _FILES.values():
        for name in pair:
            full = _find(directory, name)
            if full is None:
                missing.append(name + ".gz")
            found[name] = full
    if missing:
        raise DatasetNotFoundError(_not_found_message(directory, missing, path is not None))

    splits = []
    for images_name, labels_name in _FILES.values():
        images_file = found[images_name]
        labels_file = found[labels_name]
        x = read_idx(images_file, IDX_IMAGES_MAGIC, limit=limit)
        y = read_idx(labels_file, IDX_LABELS_MAGIC, limit=limit)
        if x.shape[1:] != (28, 28):
            raise ValueError(f"Expected 28x28 images in {images_file}, found shape {x.shape}.")
        if x.shape[0] != y.shape[0]:
            raise ValueError(
                f"{images_file} has {x.shape[0]} images but {labels_file} has {y.shape[0]} labels."
            )
        splits.append((x, y))
    return tuple(splits)
