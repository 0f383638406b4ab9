"""The blockwise path of the dense patterns: equal to the explicit computation."""

import keras
import numpy as np
import pytest

from keras_attn.kernels.blockwise import BLOCK_SIZE
from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.testing.arrays import assert_allclose, to_numpy
from keras_attn.testing.gradients import output_and_gradients

pytestmark = pytest.mark.backend_agnostic


def _pair(pattern, logit_scale="none", x=None):
    """A layer on the blockwise path (blocks of 4 queries, 3 keys) and one on the explicit path."""
    blockwise = MultiHeadSelfAttention(2, 4, attention_pattern=pattern, logit_scale=logit_scale)
    blockwise.blockwise_min_length = 8
    blockwise.blockwise_block_size = 4
    blockwise.blockwise_key_block_size = 3
    explicit = MultiHeadSelfAttention(
        2, 4, attention_pattern=pattern, logit_scale=logit_scale, implementation="reference"
    )
    blockwise(x)
    explicit(x)
    explicit.set_weights(blockwise.get_weights())
    return blockwise, explicit


@pytest.mark.parametrize(("pattern", "logit_scale"), [("causal", "log_length"), ("dense", "none")])
@pytest.mark.parametrize("length", [11, 12])
def test_blockwise_path_equals_the_explicit_path_with_gradients(pattern, logit_scale, length):
    # Blocks of 4 queries and 3 keys: at 11 positions the last ones are
    # shorter (the last key block padded and masked); at 12, dense attention
    # masks no key block and causal attention the diagonal ones only.
    x = np.random.default_rng(0).normal(size=(2, length, 8)).astype("float32")
    blockwise, explicit = _pair(pattern, logit_scale, x)
    output, grads = output_and_gradients(blockwise, x)
    expected, expected_grads = output_and_gradients(explicit, x)
    assert_allclose(output, expected, atol=1e-5)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert_allclose(grad, expected_grad, atol=1e-5)


def test_masks_and_scores_take_the_explicit_path():
    x = np.random.default_rng(1).normal(size=(2, 9, 8)).astype("float32")
    mask = np.ones((2, 9), bool)
    mask[0, :3] = False
    blockwise, explicit = _pair("causal", x=x)
    assert_allclose(to_numpy(blockwise(x, mask=mask)), to_numpy(explicit(x, mask=mask)), atol=1e-5)
    output, scores = blockwise(x, return_attention_scores=True)
    assert tuple(scores.shape) == (2, 2, 9, 9)
    assert_allclose(to_numpy(output), to_numpy(explicit(x)), atol=1e-5)


def test_blockwise_training_step_holds_no_length_by_length_tensor():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Reads the TensorFlow XLA HLO.")
    import tensorflow as tf

    length = 1536
    x = tf.random.normal((1, length, 8))
    layer = MultiHeadSelfAttention(2, 4, attention_pattern="causal")
    layer.blockwise_min_length = 1024
    layer(x[:, :8])
    block = BLOCK_SIZE  # 256 queries, the default

    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(layer(x)))
        return tape.gradient(loss, layer.trainable_variables)

    hlo = step.experimental_get_compiler_ir(x)(stage="hlo")
    assert f"{length},{length}" not in hlo
    assert f"{block},{length}" not in hlo  # no block sees every key at once
    # the logits of one step: a block of queries on a block of keys
    assert f"{block},{layer.blockwise_key_block_size}" in hlo
