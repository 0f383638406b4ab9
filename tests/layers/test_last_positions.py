"""Outputs at the last positions only: the core's hook, the BSARec block and the model.

Without dropout they are the full call's outputs at those positions, and a
model trains as the full one, loss for loss. Active dropout draws masks for
the computed positions only: the outputs then have the full call's
distribution, and trainings the full model's distribution over seeds.
"""

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
from keras_attn.models import build_bsarec, build_sasrec
from keras_attn.recommendation import evaluate_full_ranking, leave_one_out_split
from keras_attn.recommendation.training import compile_recommender, epoch_samples
from keras_attn.testing import quick_jit_compile
from keras_attn.testing.arrays import assert_allclose, to_numpy
from keras_attn.utils.training import step_losses

pytestmark = pytest.mark.backend_agnostic

# A left-padded example (the first query sees no key), a full one, a short one.
MASK = np.array([[0, 0, 1, 1, 1, 1, 1], [1, 1, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1]], bool)
# (training, dropout rate) with no dropout applied: the outputs are equal.
DROPOUT_OFF = [(False, 0.4), (True, 0.0)]
DROPOUT_OFF_IDS = ["inference", "training-without-dropout"]


def _inputs(shape=(3, 7, 8)):
    return np.random.default_rng(0).normal(size=shape).astype("float32")


def _twins(make, make_second=None):
    """`make()` and `(make_second or make)()`, built, with the same weights."""
    first, second = make(), (make_second or make)()
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
@pytest.mark.parametrize("training, dropout", DROPOUT_OFF, ids=DROPOUT_OFF_IDS)
@pytest.mark.parametrize("mask", [MASK, None], ids=["padded", "unpadded"])
def test_core_last_positions_are_the_calls_last_positions(options, count, training, dropout, mask):
    full, last = _twins(lambda: MultiHeadSelfAttention(2, 4, dropout=dropout, seed=5, **options))
    x = _inputs()
    expected = to_numpy(full(x, mask=mask, training=training))[:, -count:]
    got = to_numpy(last.attend_last_positions(x, count, mask=mask, training=training))
    assert got.shape == (3, count, 8)
    assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("training, dropout", DROPOUT_OFF, ids=DROPOUT_OFF_IDS)
def test_a_projection_that_mixes_positions_sees_the_whole_sequence(training, dropout):
    # The queries of a causal convolution read the positions before the last ones.
    full, last = _twins(
        lambda: ConvolutionalSelfAttention(2, 4, kernel_size=3, dropout=dropout, seed=5)
    )
    x = _inputs()
    expected = to_numpy(full(x, mask=MASK, training=training))[:, -2:]
    got = to_numpy(last.attend_last_positions(x, 2, mask=MASK, training=training))
    assert_allclose(got, expected, atol=1e-5)


@pytest.mark.parametrize("count", [1, 3])
@pytest.mark.parametrize("training, dropout", DROPOUT_OFF, ids=DROPOUT_OFF_IDS)
def test_filter_last_positions_are_the_filters(count, training, dropout):
    full, last = _twins(lambda: FourierFilter(cutoff=5, dropout=dropout, seed=4))
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
@pytest.mark.parametrize("training, dropout", DROPOUT_OFF, ids=DROPOUT_OFF_IDS)
def test_block_last_positions_are_the_full_blocks(alpha, training, dropout):
    def block(last_positions):
        return BSARecBlock(
            2,
            alpha=alpha,
            dropout=dropout,
            attention_dropout=dropout,
            seed=2,
            last_positions=last_positions,
        )

    full, last = _twins(lambda: block(None), lambda: block(2))
    x = _inputs()
    expected = to_numpy(full(x, mask=MASK, training=training))[:, -2:]
    assert_allclose(to_numpy(last(x, mask=MASK, training=training)), expected, atol=1e-5)


def _block(last_positions=None):
    return BSARecBlock(
        2, alpha=0.6, dropout=0.3, attention_dropout=0.3, seed=2, last_positions=last_positions
    )


# Active dropout (rate 0.3): per case, the twin layers (the full one first) and
# their outputs at the last two positions on `(inputs, mask)`, training on.
DROPOUT_CASES = {
    "attention": (
        lambda: MultiHeadSelfAttention(2, 4, attention_pattern="causal", dropout=0.3, seed=5),
        None,
        lambda layer, x, mask: layer(x, mask=mask, training=True)[:, -2:],
        lambda layer, x, mask: layer.attend_last_positions(x, 2, mask=mask, training=True),
    ),
    "filter": (
        lambda: FourierFilter(cutoff=5, dropout=0.3, seed=4),
        None,
        lambda layer, x, mask: layer(x, training=True)[:, -2:],
        lambda layer, x, mask: layer.filter_last_positions(x, 2, training=True),
    ),
    "block": (
        _block,
        lambda: _block(last_positions=2),
        lambda layer, x, mask: layer(x, mask=mask, training=True)[:, -2:],
        lambda layer, x, mask: layer(x, mask=mask, training=True),
    ),
}
DRAWS = 512


@pytest.mark.parametrize("case", DROPOUT_CASES)
def test_last_positions_dropout_has_the_full_calls_distribution(case):
    make, make_last, full_call, last_call = DROPOUT_CASES[case]
    full, last = _twins(make, make_last)
    # DRAWS copies of the inputs in one batch: one dropout mask per copy.
    x, mask = np.tile(_inputs(), (DRAWS, 1, 1)), np.tile(MASK, (DRAWS, 1))
    draws = [
        to_numpy(call(layer, x, mask)).reshape(DRAWS, 3, 2, 8)
        for call, layer in ((full_call, full), (last_call, last))
    ]
    (full_mean, last_mean), (full_std, last_std) = (
        [statistic(d, axis=0) for d in draws] for statistic in (np.mean, np.std)
    )
    assert full_std.min() > 0.01  # dropout is active in both
    # The same spread (a doubled rate gives a far larger one) and the same means.
    assert 0.9 < last_std.mean() / full_std.mean() < 1.1
    standard_error = np.sqrt((full_std**2 + last_std**2) / DRAWS)
    assert (np.abs(last_mean - full_mean) < 5 * standard_error).all()


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


# alpha=0.6 runs both branches (filter and attention); alpha=0 (no filter, the SASRec
# block) repeats the attention branch, whose last positions
# test_block_last_positions_are_the_full_blocks[0.0-...] checks in the default run.
@pytest.mark.parametrize("alpha", [pytest.param(0.0, marks=pytest.mark.slow), 0.6])
def test_model_without_dropout_trains_as_the_model_that_computes_every_position(alpha):
    model, full = (
        build_bsarec(
            30,
            max_sequence_length=9,
            hidden_dim=16,
            alpha=alpha,
            dropout=0.0,
            attention_dropout=0.0,
            last_position_only=last,
        )
        for last in (True, False)
    )
    full.set_weights(model.get_weights())
    jit_compile = keras.backend.backend() != "torch"
    assert_allclose(
        _losses(model, jit_compile=jit_compile), _losses(full, jit_compile=jit_compile), atol=1e-5
    )


NUM_ITEMS = 30
SEEDS = 5
EPOCHS, EPOCH_BATCH = 4, 32  # 19 steps per epoch


def _stepping_split():
    """Histories that step through the items by 1, 2 or 3: learnt within a few epochs."""
    rng = np.random.default_rng(0)
    starts, steps = rng.integers(0, NUM_ITEMS, 60), rng.integers(1, 4, 60)
    sequences = (starts[:, None] + steps[:, None] * np.arange(12)) % NUM_ITEMS + 1
    return leave_one_out_split(sequences, max_sequence_length=10)


def _trainings(last_position_only, split):
    """Per dropout seed: the mean loss of the last epoch, and the validation NDCG@10 after it.

    One model, compiled once (a compilation costs more than its trainings):
    each seed starts from the same weights and fresh optimizer variables, its
    dropout layers' generators seeded with it, and sees the samples in the
    same order.
    """
    keras.utils.set_random_seed(0)
    model = build_sasrec(
        NUM_ITEMS,
        max_sequence_length=10,
        hidden_dim=16,
        num_layers=1,  # the model's only block is the last one
        dropout=0.4,
        attention_dropout=0.4,
        seed=0,
        last_position_only=last_position_only,
    )
    compile_recommender(model, learning_rate=1e-2, jit_compile=quick_jit_compile())
    state = (*model.variables, *model.optimizer.variables)
    initial = [to_numpy(variable) for variable in state]
    generators = [v for v in model.variables if v.path.endswith("seed_generator_state")]
    inputs, targets = epoch_samples(split, 0, 0, "softmax", NUM_ITEMS)
    outcomes = []
    for seed in range(SEEDS):
        for variable, value in zip(state, initial, strict=True):
            variable.assign(value)
        for generator in generators:
            generator.assign(np.array([seed, 0], to_numpy(generator).dtype))
        history = model.fit(
            inputs, targets, batch_size=EPOCH_BATCH, epochs=EPOCHS, shuffle=False, verbose=0
        )
        valid = evaluate_full_ranking(
            model, split.valid_inputs, split.valid_targets, split.valid_seen
        )
        outcomes.append((history.history["loss"][-1], valid["NDCG@10"]))
    return np.array(outcomes)  # (SEEDS, 2)


# Five seeds of two trainings each: on JAX and torch a repetition (slow) of the TensorFlow
# run, since the masks are drawn by the same layer code on every backend;
# test_last_positions_dropout_has_the_full_calls_distribution checks that code's masks
# on every backend in the default run.
def _slow_off_tensorflow(test):
    return test if keras.backend.backend() == "tensorflow" else pytest.mark.slow(test)


@_slow_off_tensorflow
def test_model_with_dropout_trains_as_the_model_that_computes_every_position_over_seeds():
    # Only the dropout masks differ from seed to seed (the weights start and the
    # samples come in the same order): the last block's masks, drawn for its last
    # position only, give the trainings of the full block's masks over seeds.
    split = _stepping_split()
    last, full = (_trainings(last_position_only, split) for last_position_only in (True, False))
    spread = np.sqrt((last.std(axis=0, ddof=1) ** 2 + full.std(axis=0, ddof=1) ** 2) / 2)
    # Loss and NDCG@10 agree within twice their seed spread; with the last block's
    # rates doubled, the loss mean moves by about seven times its spread.
    assert (np.abs(last.mean(axis=0) - full.mean(axis=0)) < 2 * spread).all()
