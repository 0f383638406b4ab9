"""Wrong inputs raise clear errors, edge cases behave alike on every backend."""

import json

import keras
import numpy as np
import pytest

from keras_attn.layers import (
    BSARecBlock,
    CausalWindowPattern,
    FourierFilter,
    LogSparseAttention,
    LogSparsePattern,
    MultiHeadSelfAttention,
    T2TModule,
    TokenPerformer,
    TokenTransformer,
    TransformerBlock,
)

pytestmark = pytest.mark.backend_agnostic

PATTERNS = {
    "dense": "dense",
    "causal": "causal",
    "window": CausalWindowPattern(window=3),
    "pure": LogSparsePattern("pure"),
    "local": LogSparsePattern("local", local_window=2),
    "restart": LogSparsePattern("restart", subsequence_length=3),
}


def _inputs(shape=(2, 6, 8), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _attention(pattern="dense", **kwargs):
    return MultiHeadSelfAttention(2, 4, attention_pattern=PATTERNS[pattern], **kwargs)


def test_batch_by_length_attention_mask_is_rejected_not_broadcast_over_heads():
    # (batch, L) with batch == num_heads used to broadcast over the heads, so
    # example 1's mask changed example 0's output.
    layer = _attention()
    mask = np.ones((2, 6), bool)
    mask[1, 3:] = False
    with pytest.raises(
        ValueError, match=r"attention_mask.*\(2, 6, 6\).*attention_mask\.shape=\(2, 6\)"
    ):
        layer(_inputs(), attention_mask=mask)


@pytest.mark.parametrize(
    ("argument", "value", "expected"),
    [
        ("mask", np.ones((2, 5), bool), r"\(2, 6\)"),
        ("mask", np.ones((2, 6, 6), bool), r"\(2, 6\)"),
        ("attention_mask", np.ones((1, 6, 6), bool), r"\(2, 6, 6\)"),
        ("attention_mask", np.ones((2, 2, 6, 6), bool), r"\(2, 6, 6\)"),
        ("head_mask", np.ones((3,), "float32"), r"\(2,\) or \(2, 2\)"),
        ("head_mask", np.ones((2, 2, 1), "float32"), r"\(2,\) or \(2, 2\)"),
    ],
)
def test_mask_of_the_wrong_shape_names_argument_and_both_shapes(argument, value, expected):
    with pytest.raises(ValueError, match=rf"`{argument}` must have shape {expected}.*Received"):
        _attention()(_inputs(), **{argument: value})


@pytest.mark.parametrize("pattern", ["window", "pure", "local", "restart"])
def test_sparse_pattern_checks_the_padding_mask_length(pattern):
    with pytest.raises(ValueError, match=r"`mask` must have shape \(2, 9\)"):
        _attention(pattern)(_inputs((2, 9, 8)), mask=np.ones((2, 5), bool))


def test_mask_shapes_are_checked_when_building_a_functional_model():
    x = keras.Input((6, 8))
    with pytest.raises(ValueError, match="`attention_mask` must have shape"):
        _attention()(x, attention_mask=keras.Input((6,)))


@pytest.mark.parametrize(
    "layer",
    [
        lambda: _attention(),
        lambda: TransformerBlock(2, 16),
        lambda: BSARecBlock(2),
        lambda: FourierFilter(),
        lambda: TokenPerformer(8),
        lambda: TokenTransformer(8),
    ],
)
def test_built_layer_rejects_another_feature_size(layer):
    layer = layer()
    layer(_inputs())
    with pytest.raises(ValueError, match=r"9"):
        layer(_inputs((2, 6, 9)))


@pytest.mark.parametrize("layer", [lambda: TransformerBlock(2, 16), lambda: BSARecBlock(2)])
def test_blocks_check_the_mask_rank(layer):
    with pytest.raises(ValueError, match=r"`mask` must have shape \(2, 6\)"):
        layer()(_inputs(), mask=np.ones((2, 6, 6), bool))


@pytest.mark.parametrize(
    ("make", "argument"),
    [
        (lambda: TransformerBlock(2, 16, layer_norm_epsilon=-1e-6), "layer_norm_epsilon"),
        (lambda: TokenPerformer(8, layer_norm_epsilon=-1e-5), "layer_norm_epsilon"),
        (lambda: TokenTransformer(8, layer_norm_epsilon=-1e-5), "layer_norm_epsilon"),
        (lambda: BSARecBlock(2, layer_norm_epsilon=-1e-12), "layer_norm_epsilon"),
        (lambda: TransformerBlock(2, 16, key_dim=-1), "key_dim"),
        (lambda: TransformerBlock(2, 16, attention_dropout=2.0), "attention_dropout"),
        (lambda: T2TModule(8, kernel_sizes=(7, 0, 3)), "kernel_sizes"),
        (lambda: T2TModule(8, strides=(0, 2, 2)), "strides"),
        (lambda: MultiHeadSelfAttention(2, 4, dropout=float("nan")), "dropout"),
        (lambda: MultiHeadSelfAttention(2, 4, use_bias="yes"), "use_bias"),
        (lambda: LogSparseAttention(2, 4, variant="local", local_window=2.0), "local_window"),
    ],
)
def test_constructor_rejects_bad_values_naming_the_argument(make, argument):
    with pytest.raises(ValueError, match=rf"`{argument}`.*Received: {argument}="):
        make()


def test_numpy_scalars_are_accepted_and_stored_as_python_numbers():
    layer = MultiHeadSelfAttention(
        np.int64(2), np.int32(4), dropout=np.float32(0.1), attention_pattern="causal"
    )
    assert type(layer.num_heads) is int and type(layer.dropout) is float
    json.dumps(layer.get_config())  # plain numbers serialize
    block = TransformerBlock(np.int64(2), np.int64(16), layer_norm_epsilon=np.float64(1e-6))
    assert block(_inputs()).shape == (2, 6, 8)
    assert T2TModule(np.int64(8), kernel_sizes=np.array([7, 3, 3])).kernel_sizes == (7, 3, 3)
    assert FourierFilter(np.int64(3), dropout=np.float32(0.0)).cutoff == 3
    assert LogSparsePattern("restart", subsequence_length=np.int16(4)).subsequence_length == 4


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_empty_sequence_gives_empty_output_on_every_backend(pattern):
    layer = _attention(pattern)
    output, scores = layer(_inputs((2, 0, 8)), return_attention_scores=True)
    assert tuple(output.shape) == (2, 0, 8)
    assert tuple(scores.shape)[:3] == (2, 2, 0)
    assert tuple(scores.shape)[3] == layer.num_keys(0)


@pytest.mark.parametrize(
    "layer",
    [
        lambda: LogSparseAttention(2, 4, kernel_size=3),
        lambda: FourierFilter(3),
        lambda: BSARecBlock(2),
        lambda: TransformerBlock(2, 16),
    ],
)
def test_empty_sequence_through_composite_layers(layer):
    assert tuple(layer()(_inputs((2, 0, 8))).shape) == (2, 0, 8)


@pytest.mark.parametrize("pattern", sorted(PATTERNS))
def test_symbolic_call_with_unknown_length(pattern):
    layer = _attention(pattern, output_dim=5)
    output, scores = layer(keras.Input((None, 8)), return_attention_scores=True)
    assert tuple(output.shape) == (None, None, 5)
    assert tuple(scores.shape) == (None, 2, None, None)
    output, scores = _attention(pattern)(keras.Input((7, 8)), return_attention_scores=True)
    _, concrete = _attention(pattern)(_inputs((1, 7, 8)), return_attention_scores=True)
    assert tuple(scores.shape)[1:] == tuple(concrete.shape)[1:]
