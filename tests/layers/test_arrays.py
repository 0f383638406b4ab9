"""The numpy comparisons of `keras_attn.testing.arrays` on every backend."""

import keras
import numpy as np
import pytest

from keras_attn.testing.arrays import allclose, assert_allclose, assert_array_equal, to_numpy

pytestmark = pytest.mark.backend_agnostic


def test_compares_layer_outputs_computed_from_trainable_weights():
    layer = keras.layers.Dense(2)
    x = np.arange(6, dtype="float32").reshape(2, 3)
    outputs = layer(x)  # on torch: a tensor that requires grad
    if keras.backend.backend() == "torch":
        with pytest.raises(RuntimeError, match="requires grad"):
            np.asarray(outputs)
    expected = x @ to_numpy(layer.kernel) + to_numpy(layer.bias)
    assert isinstance(to_numpy(outputs), np.ndarray)
    assert_allclose(outputs, expected, rtol=1e-6)
    assert_array_equal(layer.kernel, to_numpy(layer.kernel))
    assert allclose(outputs, expected) and not allclose(outputs, expected + 1.0)
    with pytest.raises(AssertionError):
        assert_allclose(outputs, expected + 1.0)
    with pytest.raises(AssertionError):
        assert_array_equal(layer.bias, to_numpy(layer.bias) + 1.0)
