"""`MultiHeadSelfAttention` on native kernels equals it on the `keras.ops` references.

With `implementation="auto"` the core runs a backend's native kernels where
they apply (counted here, so that a test cannot pass on the reference
alone); with `"reference"` it runs `keras.ops` only.
"""

import importlib

import keras
import numpy as np
import pytest

from keras_attn import kernels
from keras_attn.kernels._shared import NATIVE_MODULES
from keras_attn.layers import CausalWindowPattern, LogSparsePattern, MultiHeadSelfAttention
from keras_attn.testing.arrays import assert_allclose, to_numpy
from keras_attn.testing.gradients import output_and_gradients

pytestmark = pytest.mark.backend_agnostic

PATTERNS = {
    "dense": "dense",
    "causal": "causal",
    "window": CausalWindowPattern(3),
    "logsparse": LogSparsePattern("local", local_window=2),
}
LENGTH = 9


def _kernel_of(pattern):
    return "dense_attention" if pattern in ("dense", "causal") else "offset_attention"


def _counting_native_calls(monkeypatch):
    """The names of the native kernels called, in order."""
    native = importlib.import_module(NATIVE_MODULES[keras.backend.backend()]).NATIVE
    calls = []
    for name, implementation in list(native.items()):

        def counted(*args, name=name, implementation=implementation, **kwargs):
            calls.append(name)
            return implementation(*args, **kwargs)

        monkeypatch.setitem(native, name, counted)
    return calls


def _pair(pattern, x, **kwargs):
    """The same layer with `implementation="auto"` and `"reference"`, sharing weights."""
    made = {
        implementation: MultiHeadSelfAttention(
            2, 4, attention_pattern=PATTERNS[pattern], implementation=implementation, **kwargs
        )
        for implementation in ("auto", "reference")
    }
    for layer in made.values():
        layer(x)
    made["reference"].set_weights(made["auto"].get_weights())
    return made["auto"], made["reference"]


def _inputs(seed=0):
    return np.random.default_rng(seed).normal(size=(2, LENGTH, 8)).astype("float32")


def _masks():
    mask = np.ones((2, LENGTH), bool)
    mask[0, :2] = False  # a left-padded example: its first queries see no key
    attention_mask = np.random.default_rng(1).random((2, LENGTH, LENGTH)) < 0.6
    attention_mask[1, 3] = False  # a query that sees no key
    head_mask = np.array([[1.0, 0.5], [0.0, 2.0]], "float32")
    return {
        "padding and head mask": {"mask": mask, "head_mask": head_mask},
        "attention mask": {"attention_mask": attention_mask},
    }


@pytest.mark.parametrize("masks", sorted(_masks()))
@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_native_kernels_equal_the_references_with_gradients(pattern, masks, monkeypatch):
    x = _inputs()
    native, reference = _pair(pattern, x, logit_scale="log_length")
    calls = _counting_native_calls(monkeypatch)
    kwargs = _masks()[masks]
    output, grads = output_and_gradients(native, x, **kwargs)
    native_calls = len(calls)
    expected, expected_grads = output_and_gradients(reference, x, **kwargs)
    assert len(calls) == native_calls  # the reference layer runs no native kernel
    assert (native_calls > 0) is kernels.has_native(_kernel_of(pattern))
    assert np.isfinite(output).all()
    assert_allclose(output, expected, atol=1e-5)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert_allclose(grad, expected_grad, atol=1e-5)


@pytest.mark.parametrize("policy", ["mixed_float16", "mixed_bfloat16"])
@pytest.mark.parametrize("pattern", ["causal", "logsparse"])
def test_native_kernels_equal_the_references_under_mixed_precision(pattern, policy):
    x = _inputs()
    native, reference = _pair(pattern, x, dtype=policy)
    mask = _masks()["padding and head mask"]["mask"]
    output = to_numpy(native(x, mask=mask)).astype("float32")
    expected = to_numpy(reference(x, mask=mask)).astype("float32")
    assert np.isfinite(output).all()
    assert_allclose(output, expected, atol=2e-2 if policy == "mixed_bfloat16" else 2e-3)


@pytest.mark.parametrize("pattern", ["causal", "logsparse"])
def test_native_kernels_equal_the_references_at_an_unknown_length(pattern):
    """A functional model built for any length, run by `predict` (compiled on TF and JAX)."""
    x = _inputs()
    outputs = {}
    for layer in _pair(pattern, x):
        inputs = keras.Input(shape=(None, 8))
        model = keras.Model(inputs, layer(inputs))
        outputs[layer.implementation] = model.predict(x, verbose=0)
    assert_allclose(outputs["auto"], outputs["reference"], atol=1e-5)


def test_unknown_length_graph_runs_the_native_dense_kernel():
    """TensorFlow traces a graph with the length unknown: the fused kernel takes it."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Traces a TensorFlow graph with an unknown length.")
    import tensorflow as tf

    x = _inputs()
    native, reference = _pair("causal", x)
    signature = [tf.TensorSpec((None, None, 8), "float32")]
    output = tf.function(native, input_signature=signature)(x)
    assert_allclose(to_numpy(output), to_numpy(reference(x)), atol=1e-5)


def test_implementation_is_saved_and_checked():
    layer = MultiHeadSelfAttention(2, 4, implementation="reference")
    assert layer.get_config()["implementation"] == "reference"
    assert MultiHeadSelfAttention.from_config(layer.get_config()).implementation == "reference"
    with pytest.raises(ValueError, match="Received: implementation='native'"):
        MultiHeadSelfAttention(2, 4, implementation="native")
