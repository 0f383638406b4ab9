"""Random bit strings labelled for PARITY and FIRST (Chiang & Cholak, 2022).

The formal-language tasks of "Overcoming a Theoretical Limitation of
Self-Attention" need no data files: strings are drawn uniformly at random,
or all `2^n` strings of a length are enumerated.
"""

import itertools
from typing import Literal

import numpy as np

from keras_attn._typing import Tensor
from keras_attn.layers.bit_string_features import CLS_TOKEN, TASKS


def make_bit_strings(
    num_strings: int,
    length: int,
    task: Literal["parity", "first"],
    seed: int | np.random.Generator | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Draws `num_strings` random bit strings of `length` bits.

    Args:
        num_strings: int, number of strings.
        length: int, number of bits `n` of each string.
        task: `"parity"` (label: odd number of ones; CLS after the bits) or
            `"first"` (label: first bit is 1; CLS before the bits).
        seed: int or `numpy.random.Generator`, the random source.

    Returns:
        `(tokens, labels)`: int32 tokens `(num_strings, length + 1)` with CLS
        as token `2`, and float32 labels `(num_strings,)` in `{0, 1}`.

    Example:

    >>> tokens, labels = make_bit_strings(4, 10, "first", seed=0)
    >>> tokens.shape, labels.shape
    ((4, 11), (4,))
    """
    bits = np.random.default_rng(seed).integers(0, 2, size=(num_strings, length))
    return encode_bit_strings(bits, task)


def all_bit_strings(length: int, task: Literal["parity", "first"]) -> tuple[np.ndarray, np.ndarray]:
    """All `2^length` bit strings of `length` bits, encoded like `make_bit_strings`."""
    bits = np.array(list(itertools.product((0, 1), repeat=length)), "int32")
    return encode_bit_strings(bits.reshape(-1, length), task)


def encode_bit_strings(
    bits: Tensor, task: Literal["parity", "first"]
) -> tuple[np.ndarray, np.ndarray]:
    """Adds CLS to a `(num_strings, n)` 0/1 array and computes the labels."""
    if task not in TASKS:
        raise ValueError(f"`task` must be one of {TASKS}. Received: task={task!r}")
    bits = np.asarray(bits, "int32")
    cls = np.full((bits.shape[0], 1), CLS_TOKEN, "int32")
    if task == "parity":
        return np.concatenate([bits, cls], axis=1), (bits.sum(axis=1) % 2).astype("float32")
    return np.concatenate([cls, bits], axis=1), bits[:, 0].astype("float32")
