"""Offline image data loaders.

Every loader reads files that are already on the machine (installed by a
Debian or pip package, or supplied by the user) and never downloads
anything. When a source is missing, the loader raises
`DatasetNotFoundError` with the command that installs it.

All loaders return `((x_train, y_train), (x_test, y_test))` with uint8
images in `[0, 255]` and uint8 labels, like `keras.datasets`.
"""

from keras_attn.datasets.bit_strings import all_bit_strings, encode_bit_strings, make_bit_strings
from keras_attn.datasets.cifar10 import load_cifar10
from keras_attn.datasets.digits import load_digits
from keras_attn.datasets.errors import DatasetNotFoundError
from keras_attn.datasets.fashion_mnist import load_fashion_mnist
from keras_attn.datasets.mnist_5k import load_mnist_5k

__all__ = [
    "DatasetNotFoundError",
    "all_bit_strings",
    "encode_bit_strings",
    "load_cifar10",
    "load_digits",
    "load_fashion_mnist",
    "load_mnist_5k",
    "make_bit_strings",
]
