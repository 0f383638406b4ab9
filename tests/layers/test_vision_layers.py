import re

import numpy as np
import pytest

from keras_attn.layers import (
    ClassToken,
    PatchEmbedding,
    SinCosPositionEmbedding2D,
)
from keras_attn.layers.sin_cos_position_embedding_2d import sin_cos_table
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import assert_allclose, assert_array_equal, to_numpy

pytestmark = pytest.mark.backend_agnostic

CHECKS = {
    "patch_embedding": LayerChecks(
        PatchEmbedding,
        {"patch_size": 4, "hidden_dim": 6},
        input_shape=(2, 8, 12, 3),
        expected_output_shape=(2, 6, 6),
        dynamic_axes=(),
        num_params=(4 * 4 * 3 + 1) * 6,
        bad_init_kwargs=[{"patch_size": 0}, {"hidden_dim": "8"}],
    ),
    "class_token": LayerChecks(
        ClassToken, {}, input_shape=(2, 5, 4), expected_output_shape=(2, 6, 4), num_params=4
    ),
    "sin_cos": LayerChecks(
        SinCosPositionEmbedding2D,
        {"grid_size": (2, 3), "num_prefix_tokens": 1},
        input_shape=(2, 7, 8),
        dynamic_axes=(),
        num_params=0,
        bad_init_kwargs=[{"grid_size": (2,)}, {"num_prefix_tokens": -1}],
    ),
}


test_layer_contract = LayerChecks.contract_test(CHECKS)


def test_patch_embedding_is_a_strided_convolution_over_row_major_patches():
    layer = PatchEmbedding(patch_size=2, hidden_dim=3)
    images = np.random.default_rng(0).normal(size=(1, 4, 6)).astype("float32")
    tokens = to_numpy(layer(images))
    kernel = to_numpy(layer.projection.kernel)[..., 0, :]  # (2, 2, dim)
    bias = to_numpy(layer.projection.bias)
    # Token 4 is the patch in row 1, column 1 (three patches per row).
    patch = images[0, 2:4, 2:4]
    assert_allclose(tokens[0, 4], np.einsum("ij,ijd->d", patch, kernel) + bias, atol=1e-5)


def test_patch_size_must_divide_the_image():
    with pytest.raises(ValueError, match="Received: input_shape"):
        PatchEmbedding(patch_size=5, hidden_dim=4)(np.zeros((1, 8, 8)))


def test_class_token_is_prepended():
    layer = ClassToken(initializer="ones")
    output = to_numpy(layer(np.zeros((2, 3, 4), "float32")))
    assert_array_equal(output[:, 0], 1.0)
    assert_array_equal(output[:, 1:], 0.0)


def test_sin_cos_table_values():
    table = sin_cos_table((2, 3), dim=8, num_prefix_tokens=1)
    assert table.shape == (7, 8)
    assert_array_equal(table[0], 0.0)
    # Patch (row 1, column 2) is token 1 + 5; frequencies 1 and 0.01.
    row, column, w = 1.0, 2.0, np.array([1.0, 0.01])
    expected = np.concatenate(
        [np.sin(row * w), np.cos(row * w), np.sin(column * w), np.cos(column * w)]
    )
    assert_allclose(table[6], expected, atol=1e-6)


@pytest.mark.parametrize(
    "layer, shape, received",
    [
        (ClassToken, (2, 8), "must have rank 3. Received: inputs.shape=(2, 8)"),
        (PatchEmbedding, (2, 8), "must have rank 3 or 4. Received: inputs.shape=(2, 8)"),
        (PatchEmbedding, (2, 8, 8, 3, 1), "Received: inputs.shape=(2, 8, 8, 3, 1)"),
    ],
)
def test_vision_layers_refuse_the_wrong_rank(layer, shape, received):
    arguments = {"patch_size": 4, "hidden_dim": 6} if layer is PatchEmbedding else {}
    with pytest.raises(ValueError, match=re.escape(received)):
        layer(**arguments)(np.zeros(shape, "float32"))
