"""The hooks that run the core and the block on gathered tokens and a subset of heads."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    ConvolutionalSelfAttention,
    LogSparseAttention,
    MultiHeadSelfAttention,
    TransformerBlock,
)

pytestmark = pytest.mark.backend_agnostic


def _inputs(batch=3, length=5, dim=8):
    return np.random.default_rng(0).normal(size=(batch, length, dim)).astype("float32")


@pytest.mark.parametrize(
    "options",
    [
        {},
        {"qk_scale": 0.3, "logit_scale": "log_length"},
        {"additive_mask": -1e4},
        {"attention_pattern": "causal"},
    ],
)
def test_attend_heads_is_call_with_the_other_heads_masked(options):
    layer = MultiHeadSelfAttention(3, 4, **options)
    x = _inputs()
    mask = np.array([[1, 1, 0, 1, 0], [1, 1, 1, 1, 1], [1, 0, 0, 0, 1]], bool)
    layer(x)
    heads = np.array([[2, 0], [1, 1], [0, 2]], "int32")  # in any order; a slot may repeat
    head_mask = np.array([[1, 1], [1, 0], [1, 1]], "float32")  # the repeated slot is padding
    dense_mask = np.array([[1, 0, 1], [0, 1, 0], [1, 0, 1]], "float32")
    expected = ops.convert_to_numpy(layer(x, mask=mask, head_mask=dense_mask))
    got = ops.convert_to_numpy(layer.attend_heads(x, heads, head_mask, mask))
    np.testing.assert_allclose(got, expected, atol=1e-5)
    # Heads shared by every example: the kernels sliced once, each example masking its own.
    shared = np.array([2, 0], "int32")
    head_mask = np.array([[1, 1], [0, 0], [1, 1]], "float32")  # the second keeps neither
    dense_mask = np.array([[1, 0, 1], [0, 0, 0], [1, 0, 1]], "float32")
    expected = ops.convert_to_numpy(layer(x, mask=mask, head_mask=dense_mask))
    got = ops.convert_to_numpy(layer.attend_heads(x, shared, head_mask, mask))
    np.testing.assert_allclose(got, expected, atol=1e-5)


def test_attend_heads_refuses_other_projections_and_patterns():
    x = _inputs()
    heads = np.zeros((3, 1), "int32")
    for layer, message in (
        (LogSparseAttention(num_heads=2, key_dim=4), "Received: attention_pattern="),
        (ConvolutionalSelfAttention(num_heads=2, key_dim=4), "Received: a Convolutional"),
    ):
        layer(x)
        with pytest.raises(ValueError, match=message):
            layer.attend_heads(x, heads)


def test_block_branches_add_up_to_the_block():
    block = TransformerBlock(num_heads=2, intermediate_dim=16)
    x = ops.convert_to_tensor(_inputs())
    expected = ops.convert_to_numpy(block(x))
    y = x + block.attention_branch(x)
    np.testing.assert_allclose(ops.convert_to_numpy(y + block.mlp_branch(y)), expected, atol=1e-5)
    # Every head listed: the head-subset path gives the same branch.
    every = np.tile([[1, 0]], (3, 1)).astype("int32")
    np.testing.assert_allclose(
        ops.convert_to_numpy(block.attention_branch(x, heads=every)),
        ops.convert_to_numpy(block.attention_branch(x)),
        atol=1e-5,
    )
    channels = ops.convert_to_tensor(np.tile([[1.0] * 4 + [0.0] * 4], (3, 1)).astype("float32"))
    hidden = block.mlp_norm(y) * channels[:, None, :]
    expected = block.mlp_output(block.mlp_hidden(hidden))
    np.testing.assert_allclose(
        ops.convert_to_numpy(block.mlp_branch(y, channels)),
        ops.convert_to_numpy(expected),
        atol=1e-6,
    )


def test_block_branches_refuse_what_they_cannot_run():
    x = _inputs()
    post_norm = TransformerBlock(num_heads=2, intermediate_dim=16, norm_first=False)
    post_norm(x)
    with pytest.raises(ValueError, match="Received: norm_first=False"):
        post_norm.attention_branch(x)
    attention = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    block = TransformerBlock(intermediate_dim=16, attention=attention)
    block(x)
    with pytest.raises(ValueError, match="Received: attention=MultiHeadAttention"):
        block.attention_branch(x, heads=np.zeros((3, 1), "int32"))
