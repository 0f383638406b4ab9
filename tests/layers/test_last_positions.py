"""Outputs at the last positions only: the core's hook, the BSARec block and the model."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import (
    BSARecBlock,
    ConvolutionalSelfAttention,
    FourierFilter,
    LogSparsePattern,
    MultiHeadSelfAttention,
)
from keras_attn.models import build_bsarec
from keras_attn.recommendation.training import compile_recommender
from keras_attn.testing.arrays import assert_allclose, to_numpy
from keras_attn.utils.training import step_losses

pytestmark = pytest.mark.backend_agnostic

# A left-padded example (the first query sees no key), a full one, a short one.
MASK = np.array([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1]], bool)


def _inputs(shape=(3, 7, 8)):
    return np.random.default_rng(0).normal(size=shape).astype("float32")


def _twins(make):
    """Two built layers with the same weights and the same dropout seed."""
    first, second = make(), make()
    first.build((3, 7, 8))
    second.build((3, 7, 8))
    second.set_weights(first.get_weights())
    return first, second


@pytest.mark.parametrize(
    "options",
    [
        {"attention_pattern": "causal"},
        {"attention_pattern": "causal", "additive_mask": -1e4},
        {"attention_pattern": "dense", "qk_scale": 0.3, "logit_scale": "log_length"},
    ],
)
@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("mask", [MASK, None], ids=["padded", "unpadded"])
def test_core_last_positions_are_the_calls_last_positions(options, count, training, mask):
    full, last = _twins(lambda: MultiHeadSelfAttention(2, 4, dropout=0.4, seed=5, **options))
    x = _inputs()
    expected = to_numpy(full(x, mask=mask, training=training))[:, -count:]
    got = to_numpy(last.attend_last_positions(x, count, mask=mask, training=training))
    assert got.shape == (3, count, 8)
    assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("training", [False, True])
def test_a_projection_that_mixes_positions_sees_the_whole_sequence(training):
    # The queries of a causal convolution read the positions before the last ones.
    full, last = _twins(
        lambda: ConvolutionalSelfAttention(2, 4, kernel_size=3, dropout=0.4, seed=5)
    )
    x = _inputs()
    expected = to_numpy(full(x, mask=MASK, training=training))[:, -2:]
    got = to_numpy(last.attend_last_positions(x, 2, mask=MASK, training=training))
    assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("training", [False, True])
def test_filter_last_positions_are_the_filters(count, training):
    full, last = _twins(lambda: FourierFilter(cutoff=5, dropout=0.4, seed=4))
    x = _inputs()
    expected = to_numpy(full(x, training=training))[:, -count:]
    got = to_numpy(last.filter_last_positions(x, count, training=training))
    assert_allclose(got, expected, atol=1e-5)


def test_filter_refuses_more_last_positions_than_the_length():
    with pytest.raises(ValueError, match="at most the length"):
        FourierFilter().filter_last_positions(_inputs(), 8)


def test_core_last_positions_keep_the_calls_nan_rows():
    # Under the causal pattern, the queries from position 5 on see the NaN key.
    full, last = _twins(lambda: MultiHeadSelfAttention(2, 4, attention_pattern="causal"))
    x = _inputs()
    x[0, 5, 2] = np.nan
    expected = to_numpy(full(x))[:, -3:]
    got = to_numpy(last.attend_last_positions(x, 3))
    assert np.isnan(expected[0, 1:]).all() and np.isfinite(expected[0, 0]).all()
    np.testing.assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize(
    "arguments, message",
    [({"count": 0}, "count"), ({"count": 8}, "at most the length"), ({"count": 1.5}, "count")],
)
def test_core_refuses_a_count_outside_the_sequence(arguments, message):
    layer = MultiHeadSelfAttention(2, 4)
    with pytest.raises(ValueError, match=message):
        layer.attend_last_positions(_inputs(), **arguments)


def test_core_refuses_a_sparse_pattern():
    layer = MultiHeadSelfAttention(2, 4, attention_pattern=LogSparsePattern())
    layer.build((3, 7, 8))
    with pytest.raises(ValueError, match="dense patterns only"):
        layer.attend_last_positions(_inputs())


@pytest.mark.parametrize("alpha", [0.0, 0.6, 1.0])
@pytest.mark.parametrize("training", [False, True])
def test_block_last_positions_are_the_full_blocks(alpha, training):
    def block(last_positions):
        return BSARecBlock(
            2,
            alpha=alpha,
            dropout=0.3,
            attention_dropout=0.3,
            seed=2,
            last_positions=last_positions,
        )

    full, last = block(None), block(2)
    full.build((3, 7, 8))
    last.build((3, 7, 8))
    last.set_weights(full.get_weights())
    x = _inputs()
    expected = to_numpy(full(x, mask=MASK, training=training))[:, -2:]
    assert_allclose(to_numpy(last(x, mask=MASK, training=training)), expected, atol=1e-5)


def test_block_last_positions_pass_their_mask_and_shape_on():
    inputs = keras.Input((7,), dtype="int32")
    x = keras.layers.Embedding(10, 8, mask_zero=True)(inputs)
    x = BSARecBlock(2, last_positions=3)(x)
    assert tuple(x.shape) == (None, 3, 8)
    read_mask = keras.layers.Lambda(
        lambda t, mask=None: ops.cast(mask, "float32"), output_shape=lambda shape: shape[:2]
    )
    read_mask.supports_masking = True
    seen = read_mask(x)
    model = keras.Model(inputs, seen)
    ids = np.array([[0, 0, 0, 0, 0, 1, 2], [1, 2, 3, 4, 5, 6, 7]], "int32")
    assert_allclose(to_numpy(model(ids)), [[0, 1, 1], [1, 1, 1]])


def test_block_refuses_more_last_positions_than_the_length():
    with pytest.raises(ValueError, match="last_positions"):
        BSARecBlock(2, last_positions=8)(_inputs())


def _losses(model, steps=30, jit_compile=False):
    """The running training loss after each of `steps` steps."""
    rng = np.random.default_rng(1)
    ids = rng.integers(0, 31, (16 * steps, 9)).astype("int32")
    targets = rng.integers(1, 31, 16 * steps).astype("int32")
    compile_recommender(model, jit_compile=jit_compile)
    return step_losses(model, ids, targets, 16)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_model_trains_as_the_model_that_computes_every_position(alpha):
    model, full = (
        build_bsarec(
            30, max_sequence_length=9, hidden_dim=16, alpha=alpha, seed=3, last_position_only=last
        )
        for last in (True, False)
    )
    full.set_weights(model.get_weights())
    jit_compile = keras.backend.backend() != "torch"
    assert_allclose(
        _losses(model, jit_compile=jit_compile), _losses(full, jit_compile=jit_compile), atol=1e-5
    )
