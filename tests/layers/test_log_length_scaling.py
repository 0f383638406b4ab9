"""Log-length scaled attention (Chiang & Cholak, 2022) in the attention core."""

import keras
import numpy as np
import pytest

from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.testing.arrays import allclose, assert_allclose, to_numpy

pytestmark = pytest.mark.backend_agnostic


def _single_head(logit_scale, query_weight=1.0):
    """One head of size 1 with logits `query_weight * x_q[0] * x_k[1]`."""
    layer = MultiHeadSelfAttention(1, 1, use_bias=False, logit_scale=logit_scale)
    layer.build((None, None, 2))
    layer.query_dense.kernel.assign(np.array([[[query_weight]], [[0.0]]], "float32"))
    layer.key_dense.kernel.assign(np.array([[[0.0]], [[1.0]]], "float32"))
    layer.value_dense.kernel.assign(np.array([[[1.0]], [[0.0]]], "float32"))
    layer.output_dense.kernel.assign(np.array([[[1.0, 0.0]]], "float32"))
    return layer


@pytest.mark.parametrize("length", [2, 5, 40])
def test_logits_are_multiplied_by_log_length_exactly(length):
    rng = np.random.default_rng(length)
    x = rng.normal(size=(1, length, 2)).astype("float32")
    _, weights = _single_head("log_length")(x, return_attention_scores=True)
    logits = np.log(length) * x[0, :, 0, None] * x[0, None, :, 1]  # (length, length)
    expected = np.exp(logits - logits.max(axis=-1, keepdims=True))
    expected /= expected.sum(axis=-1, keepdims=True)
    assert_allclose(to_numpy(weights)[0, 0], expected, rtol=1e-5, atol=1e-7)


def test_equals_scaling_the_query_input_when_the_query_has_no_bias():
    # The official code multiplies the query input by log n; without a query
    # bias this is the same as multiplying the logits.
    length = 9
    x = np.random.default_rng(0).normal(size=(2, length, 2)).astype("float32")
    scaled_logits = _single_head("log_length")(x)
    scaled_query = _single_head("none", query_weight=float(np.log(length)))(x)
    assert_allclose(scaled_logits, scaled_query, atol=1e-5)


def _masked_model():
    tokens = keras.Input(shape=(None,), dtype="int32")
    x = keras.layers.Embedding(
        6, 8, embeddings_initializer=keras.initializers.RandomNormal(stddev=2.0), mask_zero=True
    )(tokens)
    x = MultiHeadSelfAttention(2, 4, logit_scale="log_length")(x)
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(tokens, keras.layers.Dense(3)(x))


def test_padding_does_not_change_the_outputs_of_a_masked_model():
    keras.utils.set_random_seed(0)
    model = _masked_model()
    short = np.array([[1, 2, 3, 4, 5]])
    padded = np.array([[1, 2, 3, 4, 5, 0, 0, 0]])
    assert_allclose(model(padded)[:, :5], model(short), atol=1e-5)


def test_the_padding_mask_sets_n():
    keras.utils.set_random_seed(0)
    model = _masked_model()
    embedding, attention = model.layers[1], model.layers[2]
    short = embedding(np.array([[1, 2, 3, 4, 5]]))
    padded = embedding(np.array([[1, 2, 3, 4, 5, 0, 0, 0]]))
    # Same visible keys, but without a padding mask n is the full length 8.
    keys_only = np.arange(8)[None, None, :] < 5  # (1, 1, 8)
    keys_only = np.broadcast_to(keys_only, (1, 8, 8))
    with_mask = attention(padded, mask=np.arange(8)[None] < 5)
    without_mask = attention(padded, attention_mask=keys_only)
    assert_allclose(with_mask[:, :5], attention(short), atol=1e-5)
    assert not allclose(without_mask[:, :5], attention(short), atol=1e-3)
