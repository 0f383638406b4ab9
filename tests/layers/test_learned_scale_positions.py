import math

import keras
import numpy as np
import pytest

from keras_attn.layers import LearnedScalePositions
from keras_attn.testing import LayerChecks

pytestmark = pytest.mark.backend_agnostic

CHECKS = LayerChecks(
    LearnedScalePositions,
    {"width": 6},
    input_shape=(2, 7),
    expected_output_shape=(2, 7, 6),
    input_dtype="int32",
    input_range=(0, 3),
    num_params=3,
    bad_init_kwargs=[{"width": 5}, {"width": 0}, {"width": 6.0}],
)


test_layer_contract = LayerChecks.contract_test(CHECKS)


def test_encoding_by_hand():
    layer = LearnedScalePositions(4)
    layer(np.zeros((1, 3), "int32"))
    gamma = np.array([0.3, -0.7], "float32")
    layer.set_weights([gamma])
    encoding = keras.ops.convert_to_numpy(layer(np.zeros((2, 5), "int32")))
    i = np.arange(5)[:, None]
    expected = np.concatenate([i / 5 * np.exp(gamma), np.cos(math.pi * i * np.exp(gamma))], -1)
    np.testing.assert_allclose(encoding[1], expected, atol=1e-5)
    np.testing.assert_allclose(encoding[0], encoding[1])
    # Zero log-scales give the exact constructions' features i / n and (-1)^i.
    layer.set_weights([np.zeros(2, "float32")])
    plain = keras.ops.convert_to_numpy(layer(np.zeros((1, 4), "int32")))[0]
    np.testing.assert_allclose(plain[:, 0], np.arange(4) / 4, atol=1e-6)
    np.testing.assert_allclose(plain[:, 2], [1, -1, 1, -1], atol=1e-6)
