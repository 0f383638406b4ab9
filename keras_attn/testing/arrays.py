"""Numpy comparisons that read tensors of every backend.

`np.asarray` fails on a torch tensor that requires grad (every layer output
computed from trainable weights in eager torch), so tests read backend
tensors and variables through `keras.ops.convert_to_numpy` instead.
"""

import numpy as np
from keras import ops


def to_numpy(value):
    """A numpy array of a backend tensor, a variable, an array or a list of them."""
    return ops.convert_to_numpy(value)


def assert_allclose(actual, desired, **kwargs):
    """`np.testing.assert_allclose` on the numpy values of `actual` and `desired`."""
    np.testing.assert_allclose(to_numpy(actual), to_numpy(desired), **kwargs)


def assert_array_equal(actual, desired, **kwargs):
    """`np.testing.assert_array_equal` on the numpy values of `actual` and `desired`."""
    np.testing.assert_array_equal(to_numpy(actual), to_numpy(desired), **kwargs)


def allclose(a, b, **kwargs):
    """`np.allclose` on the numpy values of `a` and `b`."""
    return np.allclose(to_numpy(a), to_numpy(b), **kwargs)
