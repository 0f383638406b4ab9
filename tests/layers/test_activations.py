"""The exact GELU of the layers: Keras' exact GELU, written in ops that every exporter writes."""

import math

import keras
import numpy as np
import pytest

from keras_attn import layers
from keras_attn.layers._activations import erf_gelu, gelu

pytestmark = pytest.mark.backend_agnostic


def _wide_range():
    """Float32 inputs: a fine grid of [-12, 12], both tails out to 1e30, and zero."""
    grid = np.linspace(-12.0, 12.0, 240_001)
    tails = np.logspace(-30, 30, 601)
    return np.concatenate([grid, tails, -tails, [0.0]]).astype("float32")


def _exact_gelu(x):
    return keras.ops.convert_to_numpy(keras.activations.gelu(x, approximate=False))


def test_equals_keras_exact_gelu_to_1e_6_over_a_wide_range():
    x = _wide_range()
    actual = keras.ops.convert_to_numpy(gelu(x))
    assert actual.dtype == np.float32
    np.testing.assert_allclose(actual, _exact_gelu(x), atol=1e-6, rtol=1e-6)


def test_its_tensorflow_formula_equals_the_float64_gelu_to_1e_6_on_every_backend():
    """Absolute or relative: around |x| = 5 float32 `erf` is two units in the last place off."""
    x = _wide_range()
    erf = np.vectorize(math.erf)
    expected = 0.5 * x.astype("float64") * (1.0 + erf(x.astype("float64") / math.sqrt(2.0)))
    actual = keras.ops.convert_to_numpy(erf_gelu(x))
    assert actual.dtype == np.float32
    np.testing.assert_allclose(actual, expected, atol=1e-6, rtol=1e-6)


def test_half_precision_inputs_keep_their_dtype():
    x = np.linspace(-6.0, 6.0, 101).astype("float16")
    actual = keras.ops.convert_to_numpy(erf_gelu(x))
    assert actual.dtype == np.float16
    np.testing.assert_allclose(actual, _exact_gelu(x.astype("float32")), atol=4e-3)


def test_the_blocks_run_it_in_place_of_keras_exact_gelu_and_keep_their_config():
    block = layers.TransformerBlock(num_heads=2, intermediate_dim=8)
    block.build((2, 3, 4))
    assert block.mlp_hidden.activation is gelu
    assert block.get_config()["activation"] == "gelu"
    relu_block = layers.TransformerBlock(num_heads=2, intermediate_dim=8, activation="relu")
    relu_block.build((2, 3, 4))
    assert relu_block.mlp_hidden.activation is keras.activations.relu
