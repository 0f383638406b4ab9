"""The layer contract can fail: deliberately broken layers must not pass it."""

import unittest

import keras
import pytest
from keras import ops

from keras_attn.kernels._shared import MASKED_LOGIT
from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.testing import LayerChecks
from keras_attn.testing.reference import attention_num_params

pytestmark = pytest.mark.backend_agnostic


class _Float16Softmax(MultiHeadSelfAttention):
    """Computes the causal masked softmax in the compute dtype, as a naive layer would."""

    def _dense_attention(self, query, key, value, mask, attention_mask, training, scores):
        query, key = (ops.cast(x, self.compute_dtype) for x in (query, key))
        logits = ops.einsum("bqhd,bkhd->bhqk", query * self.query_key_scale, key)
        positions = ops.arange(0, ops.shape(key)[1])
        allowed = positions[:, None] >= positions[None, :]  # (length, length)
        if mask is not None:
            allowed = ops.logical_and(allowed, ops.cast(mask, "bool")[:, None, None, :])
        masked = ops.where(allowed, logits, ops.cast(MASKED_LOGIT, logits.dtype))
        weights = ops.softmax(masked, axis=-1)  # (batch, heads, length, length)
        return ops.einsum("bhqk,bkhd->bqhd", weights, value), weights


class _ExtraWeight(MultiHeadSelfAttention):
    """Holds a weight its definition does not have."""

    def build(self, input_shape):
        super().build(input_shape)
        self.unused = self.add_weight(name="unused", shape=(3,), initializer="zeros")


@keras.saving.register_keras_serializable(package="keras_attn_tests")
class _TestOnlyScale(keras.layers.Layer):
    """Registered by this test module only, so `import keras_attn` cannot revive it."""

    def build(self, input_shape):
        self.scale = self.add_weight(name="scale", shape=(input_shape[-1],), initializer="ones")

    def call(self, inputs):
        return inputs * ops.mean(self.scale)  # takes any feature size silently


def _checks(layer_cls, **kwargs):
    return LayerChecks(
        layer_cls,
        {"num_heads": 2, "key_dim": 4, **kwargs},
        input_shape=(2, 6, 8),
        num_params=attention_num_params(8, 2, 4),
        mixed_precision_on_jax=True,
    )


def test_the_core_passes_the_checks_the_broken_layers_fail(tmp_path):
    checks = _checks(MultiHeadSelfAttention, attention_pattern="causal")
    for check in ("mixed_float16", "weight_count", "wrong_feature_size"):
        checks.run(check, tmp_path)


def test_softmax_in_float16_fails_the_mixed_precision_contract(tmp_path):
    # Masked logits overflow float16 to -inf; a fully padded row then gives NaN.
    with pytest.raises(AssertionError, match="Non-finite|Relative error"):
        _checks(_Float16Softmax, attention_pattern="causal").run("mixed_float16", tmp_path)


def test_mixed_checks_skip_on_jax_only_without_the_flag(tmp_path):
    checks = _checks(_Float16Softmax, attention_pattern="causal")
    checks.mixed_precision_on_jax = False
    expected = unittest.SkipTest if keras.backend.backend() == "jax" else AssertionError
    with pytest.raises(expected):
        checks.run("mixed_float16", tmp_path)


def test_an_undeclared_weight_fails_the_weight_count(tmp_path):
    with pytest.raises(AssertionError):
        _checks(_ExtraWeight).run("weight_count", tmp_path)


def test_a_layer_that_takes_another_feature_size_silently_fails(tmp_path):
    checks = LayerChecks(_TestOnlyScale, {}, input_shape=(2, 6, 8), num_params=8)
    with pytest.raises(AssertionError, match="No ValueError"):
        checks.run("wrong_feature_size", tmp_path)


@pytest.mark.skipif(
    keras.backend.backend() != "tensorflow", reason="The fresh-process reload runs on TF."
)
def test_a_layer_unknown_to_keras_attn_fails_the_fresh_process_reload(tmp_path):
    checks = LayerChecks(_TestOnlyScale, {}, input_shape=(2, 6, 8), num_params=8)
    checks.run("keras_save_load", tmp_path)  # the same process knows the class
    with pytest.raises(AssertionError, match="fresh process"):
        checks.run("fresh_process_reload", tmp_path)
