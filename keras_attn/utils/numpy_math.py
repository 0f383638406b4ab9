"""Numerically stable softmax and log-softmax in NumPy."""

import numpy as np

from keras_attn._typing import Tensor


def log_softmax(logits: Tensor, axis: int = -1) -> np.ndarray:
    """`log(softmax(logits))`, computed from the logits shifted by their maximum.

    Args:
        logits: array of logits.
        axis: int, the axis that sums to one.

    Returns:
        An array of the same shape.

    Example:

    >>> log_softmax(np.array([0.0, np.log(3.0)])).round(4)
    array([-1.3863, -0.2877])
    """
    logits = np.asarray(logits)
    shifted = logits - logits.max(axis=axis, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=axis, keepdims=True))


def softmax(logits: Tensor, axis: int = -1) -> np.ndarray:
    """`exp(logits)` normalised over `axis`, computed from the logits shifted by their maximum.

    Args:
        logits: array of logits.
        axis: int, the axis that sums to one.

    Returns:
        An array of the same shape whose entries along `axis` sum to one.

    Example:

    >>> softmax(np.array([0.0, np.log(3.0)]))
    array([0.25, 0.75])
    """
    logits = np.asarray(logits)
    exp = np.exp(logits - logits.max(axis=axis, keepdims=True))
    return exp / exp.sum(axis=axis, keepdims=True)
