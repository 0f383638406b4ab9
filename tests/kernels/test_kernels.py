"""The attention kernels: each native implementation equals its reference.

Outputs, attention weights and gradients, in float32 to 1e-5 and in
bfloat16 to its precision, with padding masks, attention masks, rows with
no visible key, odd lengths and the log-length scale.
"""

import importlib

import keras
import numpy as np
import pytest

from keras_attn import kernels
from keras_attn.kernels import runtime
from keras_attn.kernels._shared import NATIVE_MODULES
from keras_attn.layers import CausalWindowPattern, LogSparsePattern
from keras_attn.testing.arrays import assert_allclose
from keras_attn.testing.gradients import function_output_and_gradients

pytestmark = pytest.mark.backend_agnostic

LENGTH = 37  # odd, and past the largest LogSparse offset below it (32)
BATCH, HEADS, DIM = 2, 2, 4
TOLERANCE = {"float32": 1e-5, "bfloat16": 3e-2}


def _arrays(length=LENGTH, seed=0):
    """Queries, keys and values `(batch, length, heads, dim)` with logits in the units."""
    rng = np.random.default_rng(seed)
    return [rng.normal(size=(BATCH, length, HEADS, DIM)).astype("float32") for _ in range(3)]


def _dense_mask(kind, length):
    """A boolean mask `(batch, 1, 1 or length, length)` of `kind`, or `None`."""
    rng = np.random.default_rng(1)
    if kind == "padding":  # example 0's first three keys: its first queries see none (causal)
        mask = np.ones((BATCH, 1, 1, length), bool)
        mask[0, ..., :3] = False
        mask[1, ..., -2:] = False
        return mask
    if kind == "attention":
        mask = rng.random((BATCH, 1, length, length)) < 0.6
        mask[0, 0, 4] = False  # a query that sees no key
        return mask
    return None


def _log_length():
    return np.log(np.array([LENGTH - 3.0, LENGTH], "float32")).reshape(BATCH, 1, 1, 1)


def _compare(kernel, arrays, dtype="float32", **arguments):
    """Asserts that `kernel`'s native and reference implementations agree."""
    results = {}
    for implementation in ("native", "reference"):

        def context(*tensors, implementation=implementation):
            return kernel(*tensors, implementation=implementation, **arguments)[0]

        results[implementation] = function_output_and_gradients(context, arrays, dtype=dtype)
    (output, grads), (expected, expected_grads) = results["native"], results["reference"]
    atol = TOLERANCE[dtype]
    assert np.isfinite(output).all() and all(np.isfinite(g).all() for g in grads)
    assert_allclose(output, expected, atol=atol)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert_allclose(grad, expected_grad, atol=atol)


@pytest.mark.parametrize(
    ("mask", "causal", "log_length"),
    [
        (None, False, False),
        (None, True, True),
        ("padding", False, False),
        ("padding", True, True),
        ("attention", False, True),
        ("attention", True, False),
    ],
)
def test_native_dense_attention_equals_the_reference(mask, causal, log_length):
    _compare(
        kernels.dense_attention,
        _arrays(),
        mask=_dense_mask(mask, LENGTH),
        scale=0.4,
        causal=causal,
        logit_scale=_log_length() if log_length else None,
    )


def test_native_dense_attention_in_bfloat16_equals_the_reference():
    mask = _dense_mask("padding", LENGTH)
    _compare(kernels.dense_attention, _arrays(), "bfloat16", mask=mask, scale=0.4, causal=True)


def test_native_dense_attention_of_the_last_positions_equals_the_reference():
    """Fewer queries than keys: the native kernel runs without the causal mask."""
    query, key, value = _arrays()
    arrays = [query[:, -3:], key, value]
    _compare(kernels.dense_attention, arrays, mask=_dense_mask("padding", LENGTH), scale=0.4)
    with pytest.raises(ValueError, match="`causal=True and fewer queries than keys`"):
        kernels.dense_attention(*arrays, scale=0.4, causal=True, implementation="native")


OFFSETS = {
    "logsparse": LogSparsePattern("pure").static_offsets(LENGTH),
    "local": LogSparsePattern("local", local_window=3).static_offsets(LENGTH),
    "restart": LogSparsePattern("restart", subsequence_length=8).static_offsets(LENGTH),
    "window": CausalWindowPattern(4).static_offsets(LENGTH),
    "past only": (1, 3, 40),  # no slot at offset 0, and one beyond the sequence
}


def _slot_mask(offsets, seed=2):
    """A boolean `(batch, 1, length, K)` slot mask; two queries of example 0 use no slot."""
    mask = np.random.default_rng(seed).random((BATCH, 1, LENGTH, len(offsets))) < 0.7
    mask[0, 0, 5:7] = False
    return mask


def _skip_without_native_offsets():
    if not kernels.has_native("offset_attention"):
        pytest.skip(f"No native offset_attention on {keras.backend.backend()}.")


@pytest.mark.parametrize("masked", [False, True], ids=["no mask", "mask"])
@pytest.mark.parametrize("name", sorted(OFFSETS))
def test_native_offset_attention_equals_the_reference(name, masked):
    _skip_without_native_offsets()
    offsets = OFFSETS[name]
    mask = _slot_mask(offsets) if masked else None
    arguments = {"scale": 0.4, "logit_scale": _log_length() if masked else None}
    _compare(kernels.offset_attention, _arrays(), offsets=offsets, mask=mask, **arguments)
    weights = {
        implementation: keras.ops.convert_to_numpy(
            kernels.offset_attention(
                *_arrays(), offsets, mask, implementation=implementation, **arguments
            )[1]
        )
        for implementation in ("native", "reference")
    }
    assert_allclose(weights["native"], weights["reference"], atol=1e-6)


@pytest.mark.parametrize("rows", [1, 5])
def test_native_offset_attention_in_blocks_of_rows_equals_the_reference(rows, monkeypatch):
    """The offset sums run block by block: blocks of `rows` rows, the last one shorter."""
    _skip_without_native_offsets()
    import torch

    native = importlib.import_module(NATIVE_MODULES["torch"])
    row_bytes = BATCH * HEADS * DIM * 4
    monkeypatch.setattr(native, "BLOCK_BYTES", rows * row_bytes // torch.get_num_threads())
    offsets = OFFSETS["restart"]
    mask = _slot_mask(offsets)
    _compare(kernels.offset_attention, _arrays(), offsets=offsets, mask=mask, scale=0.4)


def test_native_offset_attention_drops_the_weights_the_reference_drops():
    """A fixed "dropout" of the weights `(batch, heads, length, K)` reaches the same slots."""
    _skip_without_native_offsets()
    offsets = OFFSETS["logsparse"]
    keep = np.random.default_rng(3).random((BATCH, HEADS, LENGTH, len(offsets))) < 0.5

    def dropout(weights):
        return weights * keras.ops.convert_to_tensor(keep * 2.0, weights.dtype)

    _compare(kernels.offset_attention, _arrays(), offsets=offsets, scale=0.4, dropout=dropout)


def test_native_offset_attention_in_bfloat16_equals_the_reference():
    _skip_without_native_offsets()
    offsets = OFFSETS["local"]
    _compare(
        kernels.offset_attention,
        _arrays(),
        "bfloat16",
        offsets=offsets,
        mask=_slot_mask(offsets),
        scale=0.4,
    )


def test_native_implementation_is_refused_where_none_can_run():
    arrays = _arrays(length=5)
    if not kernels.has_native("offset_attention"):
        with pytest.raises(ValueError, match="no native implementation.*'native'"):
            kernels.offset_attention(*arrays, (0, 1), scale=1.0, implementation="native")
    with pytest.raises(ValueError, match="not with `return_weights=True`"):
        kernels.dense_attention(*arrays, scale=1.0, return_weights=True, implementation="native")
    with pytest.raises(ValueError, match="Received: implementation='fast'"):
        kernels.dense_attention(*arrays, scale=1.0, implementation="fast")
    with pytest.raises(ValueError, match="Received: kernel='blockwise_attention'"):
        kernels.has_native("blockwise_attention")
    for offsets in [(), (0, -1), (0.5,), 2]:
        with pytest.raises(ValueError, match=r"Received: offsets="):
            kernels.offset_attention(*arrays, offsets, scale=1.0)


def test_every_backend_has_a_native_dense_kernel():
    assert kernels.has_native("dense_attention")
    native = importlib.import_module(NATIVE_MODULES[keras.backend.backend()])
    assert set(native.NATIVE) <= set(kernels.NATIVE_KERNELS)


def test_runtime_dropout_draws_the_numbers_of_a_keras_dropout_layer():
    inputs = keras.ops.ones((4, 2, 6, 6))
    layer = keras.layers.Dropout(0.3, seed=7)
    twin = keras.layers.Dropout(0.3, seed=7)  # its seed generator, used by runtime.dropout
    for _ in range(2):  # both generators advance alike
        expected = keras.ops.convert_to_numpy(layer(inputs, training=True))
        dropped = runtime.dropout(inputs, 0.3, twin.seed_generator)
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(dropped), expected)
    assert 0 < (expected == 0).sum() < expected.size


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow graph")
def test_runtime_dropout_on_tensorflow_draws_without_a_key_counter_op():
    # XLA on CPU recomputed StatelessRandomGetKeyCounter for every number of a draw
    # whose shape no other draw of the step had: ~30x slower than with Philox named.
    import tensorflow as tf

    generator = keras.random.SeedGenerator(0)
    graph = (
        tf.function(lambda x: runtime.dropout(x, 0.5, generator))
        .get_concrete_function(tf.ones((2, 3)))
        .graph
    )
    types = {operation.type for operation in graph.get_operations()}
    assert "StatelessRandomUniformV2" in types
    assert "StatelessRandomGetKeyCounter" not in types
