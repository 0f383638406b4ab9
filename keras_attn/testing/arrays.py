"""Numpy comparisons that read tensors of every backend.

`np.asarray` fails on a torch tensor that requires grad (every layer output
computed from trainable weights in eager torch), so tests read backend
tensors and variables through `keras.ops.convert_to_numpy` instead.
"""

import keras
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


def assert_reloads(model, inputs, path, atol=1e-5):
    """Saves `model` to the `.keras` file `path`, loads it back and compares outputs.

    Args:
        model: a built `keras.Model`.
        inputs: inputs the two models are called on.
        path: path of the `.keras` file to write.
        atol: float, absolute tolerance of the comparison.

    Returns:
        The loaded model.
    """
    model.save(path)
    reloaded = keras.models.load_model(path)
    assert_allclose(reloaded(inputs), model(inputs), atol=atol)
    return reloaded
