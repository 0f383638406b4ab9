import numpy as np
import pytest

from keras_attn.layers import BitStringFeatures
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import assert_allclose, to_numpy

pytestmark = pytest.mark.backend_agnostic

CHECKS = LayerChecks(
    BitStringFeatures,
    {"task": "parity", "width": 6, "mirrored": True},
    input_shape=(2, 7),
    expected_output_shape=(2, 7, 12),
    input_dtype="int32",
    input_range=(0, 3),
    num_params=0,
    bad_init_kwargs=[{"task": "dyck"}, {"width": 4}, {"width": 6.0}],
)


test_layer_contract = LayerChecks.contract_test(CHECKS)


def test_parity_features_by_hand():
    tokens = np.array([[1, 0, 1, 0, 2], [0, 0, 1, 1, 2]])
    features = to_numpy(BitStringFeatures("parity", width=7)(tokens))
    length = 5
    expected = np.zeros((2, length, 7), "float32")
    for row in range(2):
        for i in range(length):
            expected[row, i, tokens[row, i]] = 1.0
            expected[row, i, 3] = i / length
            expected[row, i, 4] = (-1) ** i
    assert_allclose(features, expected, atol=1e-7)


def test_first_features_mirrored_and_without_tokens():
    tokens = np.array([[2, 1, 0, 1]])
    mirrored = to_numpy(BitStringFeatures("first", width=4, mirrored=True)(tokens))
    half = np.array([[0, 0, 1, 0], [0, 1, 0, 1], [1, 0, 0, 0], [0, 1, 0, 0]], "float32")
    assert_allclose(mirrored[0], np.concatenate([half, -half], axis=-1))
    positions_only = to_numpy(BitStringFeatures("first", 3, include_tokens=False)(tokens))
    assert_allclose(positions_only[0, :, 0], [0, 1, 0, 0])
    assert_allclose(positions_only[0, :, 1:], 0.0)


def test_features_follow_the_length_of_each_input():
    layer = BitStringFeatures("parity", width=5)
    for length in (3, 11, 1000):
        features = to_numpy(layer(np.zeros((1, length), "int32")))
        assert_allclose(features[0, :, 3], np.arange(length) / length, atol=1e-6)
