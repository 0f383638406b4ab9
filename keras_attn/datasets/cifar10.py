"""CIFAR-10 from a user-supplied copy in the python-pickle layout."""

import codecs
import os
import pickle
import tarfile

import numpy as np

from keras_attn.datasets._utils import TrainTestSplit
from keras_attn.datasets.errors import CorruptDataError, DatasetNotFoundError

ENV_VAR = "KERAS_ATTN_CIFAR10_DIR"
"""Environment variable read when `load_cifar10` gets no `path`."""

CLASS_NAMES = (
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
)
"""Names of the 10 CIFAR-10 classes, indexed by label."""

SUBFOLDER = "cifar-10-batches-py"
TRAIN_FILES = tuple(f"data_batch_{i}" for i in range(1, 6))
TEST_FILE = "test_batch"

_LAYOUT = (
    "Expected the CIFAR-10 python version: a folder holding the pickle "
    f"files {', '.join(TRAIN_FILES)} and {TEST_FILE} (directly or inside a "
    f"`{SUBFOLDER}/` subfolder), or the archive `cifar-10-python.tar.gz` "
    "itself. keras_attn never downloads data: get that archive yourself "
    "and pass its path (or the folder it was extracted to) as `path=`, or "
    f"set the environment variable {ENV_VAR}."
)


def _decode_batch(payload, source):
    """Returns `(x, y)` from one unpickled CIFAR-10 batch dictionary."""
    if not isinstance(payload, dict):
        raise CorruptDataError(f"{source} is not a CIFAR-10 batch (not a dict).")
    # The official files were pickled by Python 2: keys are bytes.
    batch = {
        (key.decode("latin1") if isinstance(key, bytes) else key): value
        for key, value in payload.items()
    }
    if "data" not in batch or "labels" not in batch:
        raise CorruptDataError(f"{source} is not a CIFAR-10 batch (no 'data' or 'labels' key).")
    data = _integers(batch["data"], "data", source, upper=255)
    labels = _integers(batch["labels"], "labels", source, upper=9)
    if data.ndim != 2 or data.shape[1] != 3072:
        raise CorruptDataError(
            f"Expected 'data' of shape (N, 3072) in {source}, found {data.shape}."
        )
    if labels.shape != (data.shape[0],):
        raise CorruptDataError(f"{source} has {data.shape[0]} images but {labels.size} labels.")
    # Each row is 1024 red, then 1024 green, then 1024 blue values, each a
    # 32x32 plane in row-major order: go to channels-last (N, 32, 32, 3).
    x = data.astype(np.uint8).reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)
    return np.ascontiguousarray(x), labels.astype(np.uint8)


def _integers(values, key, source, upper):
    """`values` as an integer array with every entry in `[0, upper]`, or `CorruptDataError`."""
    array = np.asarray(values)
    if array.size and not np.issubdtype(array.dtype, np.integer):
        raise CorruptDataError(f"Expected integer '{key}' in {source}, found dtype {array.dtype}.")
    if array.size and (array.min() < 0 or array.max() > upper):
        raise CorruptDataError(
            f"'{key}' values outside [0, {upper}] in {source}: found {array.min()} to "
            f"{array.max()}."
        )
    return array


def _latin1_bytes(text, encoding):
    """`_codecs.encode` as Python 3 pickles bytes (protocol 2), for Latin-1 only."""
    if encoding != "latin1":
        raise pickle.UnpicklingError(f"bytes encoded as {encoding!r}, not 'latin1'")
    return codecs.encode(text, encoding)


# The only globals a CIFAR-10 batch refers to: numpy's array and dtype
# reconstructors (under their numpy 1 and numpy 2 module names) and the
# Latin-1 encoder that Python 3 uses to pickle bytes.
_RECONSTRUCT = np.zeros(0).__reduce__()[0]  # how protocols 0-4 rebuild an array
_FROM_BUFFER = np.zeros(0).__reduce_ex__(5)[0]  # how protocol 5 does
_SAFE_GLOBALS = {
    ("numpy.core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy._core.multiarray", "_reconstruct"): _RECONSTRUCT,
    ("numpy.core.numeric", "_frombuffer"): _FROM_BUFFER,
    ("numpy._core.numeric", "_frombuffer"): _FROM_BUFFER,
    ("numpy", "ndarray"): np.ndarray,
    ("numpy", "dtype"): np.dtype,
    ("_codecs", "encode"): _latin1_bytes,
}


class _BatchUnpickler(pickle.Unpickler):
    """An unpickler that builds dicts, lists, strings, numbers and numpy arrays only.

    Any other global (a function or class a pickle could call to run code)
    is refused before it is looked up, so a poisoned file runs nothing.
    """

    def find_class(self, module, name):
        if (module, name) in _SAFE_GLOBALS:
            return _SAFE_GLOBALS[(module, name)]
        raise pickle.UnpicklingError(
            f"it refers to `{module}.{name}`, which a CIFAR-10 batch never holds"
        )


def _load_pickle(handle, source):
    """Unpickles one batch with `_BatchUnpickler`; a refused or broken file is a ValueError."""
    try:
        return _BatchUnpickler(handle, encoding="bytes").load()
    except (pickle.UnpicklingError, EOFError, TypeError, ValueError, AttributeError) as error:
        raise CorruptDataError(
            f"{source} is not a plain CIFAR-10 batch and was not loaded ({error}). Only "
            "dicts, lists, strings, numbers and numpy arrays are read from the batch "
            "files, so that no code in them can run."
        ) from error


def _read_folder(folder):
    for base in (folder, os.path.join(folder, SUBFOLDER)):
        if all(os.path.isfile(os.path.join(base, name)) for name in (*TRAIN_FILES, TEST_FILE)):
            batches = {}
            for name in (*TRAIN_FILES, TEST_FILE):
                full = os.path.join(base, name)
                with open(full, "rb") as f:
                    batches[name] = _decode_batch(_load_pickle(f, full), full)
            return batches
    present = [
        name
        for name in (*TRAIN_FILES, TEST_FILE)
        if os.path.isfile(os.path.join(folder, name))
        or os.path.isfile(os.path.join(folder, SUBFOLDER, name))
    ]
    missing = [n for n in (*TRAIN_FILES, TEST_FILE) if n not in present]
    raise DatasetNotFoundError(
        f"CIFAR-10 was not found in {folder!r} (missing: {', '.join(missing)}). {_LAYOUT}"
    )


def _read_archive(archive):
    batches = {}
    with tarfile.open(archive, "r:*") as tar:
        for member in tar.getmembers():
            name = os.path.basename(member.name)
            if member.isfile() and name in (*TRAIN_FILES, TEST_FILE):
                source = f"{archive}:{member.name}"
                handle = tar.extractfile(member)
                batches[name] = _decode_batch(_load_pickle(handle, source), source)
    missing = [n for n in (*TRAIN_FILES, TEST_FILE) if n not in batches]
    if missing:
        raise DatasetNotFoundError(
            f"The archive {archive!r} does not hold the CIFAR-10 batches "
            f"(missing: {', '.join(missing)}). {_LAYOUT}"
        )
    return batches


def load_cifar10(path: str | os.PathLike | None = None) -> TrainTestSplit:
    """Loads CIFAR-10 from a copy you supply, in the python-pickle layout.

    CIFAR-10 (Krizhevsky 2009) has 50,000 training and 10,000 test colour
    images of 32x32 pixels in 10 classes (see `CLASS_NAMES` in this
    module). No package ships it, and keras_attn never downloads data, so
    you point the loader at the "CIFAR-10 python version" yourself: either
    the archive `cifar-10-python.tar.gz` or the folder it extracts to.

    The folder must hold `data_batch_1` ... `data_batch_5` and `test_batch`,
    directly or in a `cifar-10-batches-py/` subfolder. Each file is a pickled
    dict with `data`, a uint8 array of shape `(10000, 3072)` whose rows are
    1024 red, 1024 green then 1024 blue values (each a 32x32 plane in
    row-major order), and `labels`, a list of ints in `[0, 9]`. Rows are
    reshaped to channels-last images.

    The batch files are unpickled with an unpickler that builds only dicts,
    lists, strings, numbers and numpy arrays: a file that refers to any other
    function or class (which a poisoned pickle calls to run code) is refused
    with a `CorruptDataError` before anything in it runs.

    Args:
        path: folder (or `.tar.gz` archive) as described above. When `None`,
            the environment variable `KERAS_ATTN_CIFAR10_DIR` is used.

    Returns:
        Tuple of numpy arrays `((x_train, y_train), (x_test, y_test))`.
        `x_*` are uint8 of shape `(num_samples, 32, 32, 3)` (channels last,
        RGB) with values in `[0, 255]`; `y_*` are uint8 of shape
        `(num_samples,)` with labels in `[0, 9]`.

    Raises:
        DatasetNotFoundError: if no path is given, or the path does not
            hold the files. The message explains the expected layout.
        CorruptDataError: (a `ValueError`) if a batch file is not a plain
            CIFAR-10 batch: other objects than the format's, pixels that are
            not integers in `[0, 255]`, labels outside `[0, 9]`.

    Example:

    ```python
    (x_train, y_train), (x_test, y_test) = load_cifar10("~/data/cifar-10")
    x_train.shape  # (50000, 32, 32, 3)
    ```
    """
    if path is None:
        path = os.environ.get(ENV_VAR) or None
        if path is None:
            raise DatasetNotFoundError(
                "CIFAR-10 needs a location: pass `path=` or set the "
                f"environment variable {ENV_VAR}. {_LAYOUT}"
            )
    path = os.path.expanduser(os.fspath(path))
    if os.path.isdir(path):
        batches = _read_folder(path)
    elif os.path.isfile(path) and tarfile.is_tarfile(path):
        batches = _read_archive(path)
    else:
        raise DatasetNotFoundError(
            f"CIFAR-10 was not found: {path!r} is not a folder or a tar archive. {_LAYOUT}"
        )
    x_train = np.concatenate([batches[n][0] for n in TRAIN_FILES])
    y_train = np.concatenate([batches[n][1] for n in TRAIN_FILES])
    x_test, y_test = batches[TEST_FILE]
    return (x_train, y_train), (x_test, y_test)
