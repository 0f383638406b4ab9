"""The 8x8 handwritten digits bundled with scikit-learn."""

import numpy as np

from keras_attn.datasets._utils import TrainTestSplit, check_split, stratified_split
from keras_attn.datasets.errors import DatasetNotFoundError


def load_digits(test_fraction: float = 0.2, seed: int = 0) -> TrainTestSplit:
    """Loads scikit-learn's 8x8 handwritten digits as uint8 images.

    The source is `sklearn.datasets.load_digits`, which reads a file bundled
    with scikit-learn (1,797 images, about 180 per class 0-9; originally the
    UCI "Optical Recognition of Handwritten Digits" data). Nothing is
    downloaded.

    The original pixel values are integers in `[0, 16]`. So that every image
    loader in `keras_attn.datasets` returns the same dtype and range, they
    are rescaled to uint8 `[0, 255]` as `round(value * 255 / 16)`: 0 stays
    0, 16 becomes 255, and the 17 grey levels stay distinct. Divide by 255
    as for the other loaders.

    The split is a deterministic stratified shuffle: every class keeps the
    same share in both splits, and both splits come back shuffled.

    Args:
        test_fraction: float in (0, 1), share of each class put in the test
            split. Defaults to `0.2`.
        seed: non-negative int. The same seed always gives the same split.

    Returns:
        `((x_train, y_train), (x_test, y_test))` in the format of every image
        loader of `keras_attn.datasets`: uint8 images `(n, 8, 8)` in
        `[0, 255]` and their uint8 labels `(n,)` in `[0, 9]`.

    Raises:
        DatasetNotFoundError: if scikit-learn is not installed.
        ValueError: if `test_fraction` or `seed` is invalid.

    Example:

    ```python
    (x_train, y_train), (x_test, y_test) = load_digits()
    x_train.shape, x_test.shape  # ((1438, 8, 8), (359, 8, 8))
    ```
    """
    test_fraction, seed = check_split(test_fraction, seed)
    try:
        from sklearn.datasets import load_digits as sklearn_load_digits
    except ImportError as error:
        raise DatasetNotFoundError(
            "The digits data set was not found: it ships inside scikit-learn, "
            "which is not installed. keras_attn never downloads data. "
            'Install it with `pip install "keras-attn[reproduce]"`.'
        ) from error
    bunch = sklearn_load_digits()
    images = np.asarray(bunch.images, dtype=np.float64)
    x = np.round(images * (255.0 / 16.0)).astype(np.uint8)
    y = np.asarray(bunch.target).astype(np.uint8)
    return stratified_split(x, y, test_fraction, seed)
