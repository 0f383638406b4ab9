import importlib

import keras
import numpy as np
import pytest

from keras_attn.kernels._shared import NATIVE_MODULES
from keras_attn.layers import CausalWindowPattern, LogSparsePattern, MultiHeadSelfAttention
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import allclose, assert_allclose, to_numpy
from keras_attn.testing.gradients import output_and_gradients
from keras_attn.testing.reference import attention_num_params, self_attention_reference

pytestmark = pytest.mark.backend_agnostic

BAD_ARGUMENTS = [
    {"num_heads": 0},
    {"key_dim": 2.5},
    {"value_dim": -1},
    {"output_dim": 0},
    {"dropout": 1.0},
    {"attention_pattern": "sparse"},
    {"logit_scale": "log"},
    {"additive_mask": 0.0},
    {"additive_mask": "large"},
    {"additive_mask": -10000.0, "attention_pattern": CausalWindowPattern(window=3)},
    {"qk_scale": 0.0},
    {"qk_scale": -0.5},
    {"qk_scale": "0.5"},
    {"implementation": "native"},
]

DENSE_CHECKS = LayerChecks(
    MultiHeadSelfAttention,
    {"num_heads": 2, "key_dim": 4, "dropout": 0.1, "attention_pattern": "causal"},
    input_shape=(2, 6, 8),
    extra_inputs={"head_mask": (2,)},
    num_params=attention_num_params(8, 2, 4),
    bad_init_kwargs=BAD_ARGUMENTS,
    mixed_precision_on_jax=True,
)
SPARSE_CHECKS = LayerChecks(
    MultiHeadSelfAttention,
    {
        "num_heads": 2,
        "key_dim": 4,
        "output_dim": 5,
        "attention_pattern": CausalWindowPattern(window=3),
        "logit_scale": "log_length",
        # Not the default 1 / sqrt(4): configs and saved files must keep it.
        "qk_scale": 0.3,
    },
    input_shape=(2, 6, 8),
    expected_output_shape=(2, 6, 5),
    extra_inputs={"head_mask": (2,)},
    num_params=attention_num_params(8, 2, 4, output_dim=5),
    mixed_precision_on_jax=True,
)


test_dense_layer_contract = LayerChecks.contract_test(DENSE_CHECKS)


test_sparse_layer_contract = LayerChecks.contract_test(SPARSE_CHECKS)


def _inputs(shape=(2, 7, 8), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _built(**kwargs):
    layer = MultiHeadSelfAttention(**{"num_heads": 2, "key_dim": 4, **kwargs})
    layer(_inputs())
    return layer


def test_same_weights_and_outputs_as_keras_multi_head_attention():
    x = _inputs()
    ours = _built()
    theirs = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    theirs(x, x)
    assert [w.shape for w in theirs.weights] == [w.shape for w in ours.weights]
    theirs.set_weights(ours.get_weights())
    assert_allclose(ours(x), theirs(x, x), atol=1e-5)


def test_dense_matches_numpy_reference():
    x = _inputs()
    layer = _built()
    output, weights = layer(x, return_attention_scores=True)
    ref_output, ref_weights = self_attention_reference(x, layer)
    assert_allclose(output, ref_output, atol=1e-5)
    assert_allclose(weights, ref_weights, atol=1e-6)


def test_causal_never_attends_to_the_future():
    x = _inputs()
    layer = _built(attention_pattern="causal")
    output, weights = layer(x, return_attention_scores=True)
    weights = to_numpy(weights)
    assert np.all(np.triu(weights[0, 0], k=1) == 0)
    assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    allowed = np.tril(np.ones((7, 7), bool))
    assert_allclose(output, self_attention_reference(x, layer, allowed)[0], atol=1e-5)
    # Changing a later position leaves every earlier output unchanged.
    changed = x.copy()
    changed[:, 4:] += 1.0
    assert_allclose(layer(changed)[:, :4], output[:, :4], atol=1e-6)


def test_sparse_pattern_equals_dense_attention_under_its_mask():
    x = _inputs(shape=(2, 9, 8))
    pattern = CausalWindowPattern(window=3)
    layer = _built(attention_pattern=pattern)
    output, weights = layer(x, return_attention_scores=True)
    assert weights.shape == (2, 2, 9, 3)
    allowed = to_numpy(pattern.dense_mask(9))
    assert_allclose(output, self_attention_reference(x, layer, allowed)[0], atol=1e-5)


def test_padding_mask_removes_keys_and_empty_rows_give_zeros():
    x = _inputs()
    mask = np.array([[1, 1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1, 1]], bool)
    layer = _built()
    output = layer(x, mask=mask)
    assert_allclose(
        output, self_attention_reference(x, layer, mask[:, None, None, :])[0], atol=1e-5
    )
    # Padded keys don't matter: changing them changes nothing.
    changed = x.copy()
    changed[0, 4:] = 100.0
    assert_allclose(layer(changed, mask=mask)[0, :4], output[0, :4], atol=1e-5)
    # A query that sees no key outputs the output bias alone (zero context).
    no_keys = np.zeros((1, 7, 7), bool)
    output = layer(x[:1], attention_mask=no_keys)
    assert_allclose(output, np.broadcast_to(layer.output_dense.bias, output.shape))


def test_additive_mask_lets_queries_without_keys_attend_over_every_key():
    """The official BSARec/SASRec masking: `-10000` added to masked logits."""
    x = _inputs()
    mask = np.array([[0, 0, 0, 1, 1, 1, 1], [1] * 7], bool)  # left padding
    causal = np.tril(np.ones((7, 7), bool))[None, None]
    allowed = causal & mask[:, None, None, :]
    layer = _built(attention_pattern="causal", additive_mask=-10000.0)
    output, weights = layer(x, mask=mask, return_attention_scores=True)
    expected, expected_weights = self_attention_reference(x, layer, allowed, additive_mask=-1e4)
    assert_allclose(output, expected, atol=1e-5)
    assert_allclose(weights, expected_weights, atol=1e-6)
    # The padded queries 0..2 see no key: they attend over all 7 positions,
    # future real items included, and their weights sum to one.
    weights = to_numpy(weights)
    assert np.all(weights[0, :, :3, 3:].sum(-1) > 0.1)
    assert_allclose(weights.sum(-1), 1.0, atol=1e-6)
    # Queries that see a key get exactly the weights of the default masking,
    # and the default gives the padded queries a zero context.
    exact = _built(attention_pattern="causal")
    exact.set_weights(layer.get_weights())
    exact_output = to_numpy(exact(x, mask=mask))
    assert_allclose(exact_output[0, 3:], to_numpy(output)[0, 3:], atol=1e-6)
    assert_allclose(exact_output[1], to_numpy(output)[1], atol=1e-6)
    bias = to_numpy(exact.output_dense.bias)
    assert_allclose(exact_output[0, :3], np.broadcast_to(bias, (3, 8)), atol=1e-6)
    assert np.abs(to_numpy(output)[0, :3] - exact_output[0, :3]).max() > 1e-2
    config = MultiHeadSelfAttention.from_config(layer.get_config()).get_config()
    assert config["additive_mask"] == -10000.0


def test_keras_masking_flows_through_functional_model():
    tokens = keras.Input(shape=(None,), dtype="int32")
    embedded = keras.layers.Embedding(10, 8, mask_zero=True)(tokens)
    attended = MultiHeadSelfAttention(num_heads=2, key_dim=4)(embedded)
    pooled = keras.layers.GlobalAveragePooling1D()(attended)
    model = keras.Model(tokens, pooled)
    ids = np.array([[3, 4, 5, 0, 0]])
    # Padding with more zeros changes nothing: the mask hides them everywhere.
    assert_allclose(model(ids), model(np.pad(ids, ((0, 0), (0, 3)))), atol=1e-5)


def test_head_mask_multiplies_each_head_output():
    x = _inputs()
    layer = _built()
    for head_mask in ([1.0, 0.0], [[0.5, 1.0], [0.0, 2.0]]):
        assert_allclose(
            layer(x, head_mask=np.array(head_mask, "float32")),
            self_attention_reference(x, layer, head_mask=head_mask)[0],
            atol=1e-5,
        )


def test_log_length_scales_logits_by_log_of_unmasked_length():
    x = _inputs()
    mask = np.array([[1, 1, 1, 1, 1, 0, 0], [1] * 7], bool)
    layer = _built(logit_scale="log_length")
    _, weights = layer(x, mask=mask, return_attention_scores=True)
    scale = np.log(np.array([5.0, 7.0])).reshape(2, 1, 1, 1)
    _, ref_weights = self_attention_reference(x, layer, mask[:, None, None, :], logit_scale=scale)
    assert_allclose(weights, ref_weights, atol=1e-6)
    # Padding does not change the scale: the 5 real positions give the same
    # output alone as with 2 padded positions.
    alone = layer(x[:1, :5])
    assert_allclose(layer(x[:1], mask=mask[:1])[:, :5], alone, atol=1e-5)


def test_softmax_runs_in_float32_under_mixed_precision():
    keras.utils.set_random_seed(1)
    mixed = MultiHeadSelfAttention(num_heads=2, key_dim=4, dtype="mixed_float16")
    full = _built()
    x = _inputs() * 8.0  # sharp attention: logits in the tens
    mixed(x)
    mixed.set_weights(full.get_weights())
    _, weights = mixed(x, return_attention_scores=True)
    _, full_weights = full(x, return_attention_scores=True)
    weights = to_numpy(weights)
    assert weights.dtype == np.float16
    # Logits in the tens are rounded to about 0.02 in float16.
    assert_allclose(weights.astype("float32"), full_weights, atol=3e-2)


def test_dropout_only_in_training():
    layer = _built(dropout=0.5, seed=1)
    x = _inputs()
    assert_allclose(layer(x), layer(x, training=False))
    assert not allclose(layer(x, training=True), layer(x))


def test_rank_two_input_is_rejected():
    with pytest.raises(ValueError, match="Received: input_shape"):
        MultiHeadSelfAttention(num_heads=2, key_dim=4)(np.ones((2, 8), "float32"))


def _sparse_and_dense(pattern, shifted):
    """A layer on `pattern` (shifted or gathered keys) and a dense one with its weights."""
    sparse = _built(attention_pattern=pattern)
    sparse.shifted_sparse_keys = shifted
    dense = _built()
    dense.set_weights(sparse.get_weights())
    return sparse, dense


@pytest.mark.parametrize("shifted", [True, False], ids=["shifted", "gathered"])
@pytest.mark.parametrize(
    "pattern", [CausalWindowPattern(3), LogSparsePattern()], ids=["window", "logsparse"]
)
def test_sparse_pattern_reads_the_attention_mask_at_its_slots(pattern, shifted):
    sparse, dense = _sparse_and_dense(pattern, shifted)
    x = _inputs()
    rng = np.random.default_rng(3)
    attention_mask = rng.random((2, 7, 7)) < 0.6
    attention_mask[1, 4] = False  # a query that sees no key: a zero context
    mask = np.ones((2, 7), bool)
    mask[0, 1] = False
    both = attention_mask & to_numpy(pattern.dense_mask(7)).astype(bool)
    output = sparse(x, mask=mask, attention_mask=attention_mask)
    assert_allclose(output, dense(x, mask=mask, attention_mask=both), atol=1e-5)
    assert not allclose(output, sparse(x, mask=mask), atol=1e-3)


@pytest.mark.parametrize("shifted", [True, False], ids=["shifted", "gathered"])
def test_sparse_pattern_hides_a_non_finite_key_that_the_attention_mask_hides(shifted):
    sparse, dense = _sparse_and_dense(CausalWindowPattern(3), shifted)
    x = _inputs()
    x[0, 2] = np.nan
    attention_mask = np.ones((2, 7, 7), bool)
    attention_mask[0, 3:, 2] = False  # the later queries of example 0 do not see position 2
    both = attention_mask & to_numpy(CausalWindowPattern(3).dense_mask(7)).astype(bool)
    output = to_numpy(sparse(x, attention_mask=attention_mask))
    assert np.isnan(output[0, 2]).all()  # it sees its own, non-finite, key
    assert np.isfinite(output[0, 3:]).all() and np.isfinite(output[1]).all()
    assert_allclose(output, dense(x, attention_mask=both), atol=1e-5)


def test_causal_window_pattern():
    indices, valid = CausalWindowPattern(window=3).key_indices(4)
    assert to_numpy(indices).tolist() == [
        [0, 0, 0],
        [0, 0, 1],
        [0, 1, 2],
        [1, 2, 3],
    ]
    assert to_numpy(valid).sum(-1).tolist() == [1, 2, 3, 3]
    with pytest.raises(ValueError, match="Received: window=0"):
        CausalWindowPattern(window=0)


@pytest.mark.parametrize(
    ("use_bias", "output_use_bias", "biased"),
    [
        (True, None, [True] * 4),
        (False, True, [False] * 3 + [True]),
        (True, False, [True] * 3 + [False]),
    ],
)
def test_output_use_bias_sets_the_output_bias_apart(use_bias, output_use_bias, biased):
    x = _inputs()
    layer = _built(use_bias=use_bias, output_use_bias=output_use_bias, bias_initializer="ones")
    projections = (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
    assert [d.bias is not None for d in projections] == biased
    assert_allclose(layer(x), self_attention_reference(x, layer)[0], atol=1e-5)
    clone = MultiHeadSelfAttention.from_config(layer.get_config())
    assert clone.output_use_bias is biased[3]


def _counting_fused_calls(monkeypatch):
    """The `causal` argument of each call of the backend's fused dense kernel."""
    calls = []
    native = importlib.import_module(NATIVE_MODULES[keras.backend.backend()]).NATIVE
    fused = native["dense_attention"]

    def counted(*args, **kwargs):
        calls.append(kwargs["causal"])
        return fused(*args, **kwargs)

    monkeypatch.setitem(native, "dense_attention", counted)
    return calls


@pytest.mark.parametrize("pattern", ["dense", "causal"])
@pytest.mark.parametrize("logit_scale", ["none", "log_length"])
def test_fused_path_equals_the_masked_softmax_computation(pattern, logit_scale, monkeypatch):
    """Without scores the core calls `ops.dot_product_attention`, with the same result.

    Padding leaves rows with no visible key (all of example 0 when dense, its
    first two rows when causal): they must give zero context, not the kernel's
    uniform average.
    """
    calls = _counting_fused_calls(monkeypatch)
    layer = MultiHeadSelfAttention(2, 4, attention_pattern=pattern, logit_scale=logit_scale)
    x = _inputs()
    mask = np.ones((2, 7), bool)
    mask[0] = [False, False, True, True, False, True, True] if pattern == "causal" else False
    mask[1, 5:] = False
    layer(x)
    calls.clear()
    output = to_numpy(layer(x, mask=mask))
    assert calls == [pattern == "causal"]
    expected = to_numpy(layer(x, mask=mask, return_attention_scores=True)[0])
    assert len(calls) == 1  # the scores come from the explicit computation
    assert_allclose(output, expected, atol=1e-5)
    empty = slice(0, 2) if pattern == "causal" else slice(None)
    bias = to_numpy(layer.output_dense.bias)
    assert_allclose(output[0, empty], np.broadcast_to(bias, output[0, empty].shape))
    allowed = mask[:, None, None, :]
    if pattern == "causal":
        allowed = allowed & np.tri(7, dtype=bool)
    scale = None
    if logit_scale == "log_length":
        scale = np.log(np.maximum(mask.sum(-1), 1)).reshape(2, 1, 1, 1)
    reference = self_attention_reference(x, layer, allowed, logit_scale=scale)[0]
    assert_allclose(output, reference, atol=1e-5)


def test_fused_path_gradients_equal_the_explicit_path():
    x = _inputs()
    mask = np.ones((2, 7), bool)
    mask[0, :3] = False
    fused = MultiHeadSelfAttention(2, 4, attention_pattern="causal")
    explicit = MultiHeadSelfAttention(2, 4, attention_pattern="causal", implementation="reference")
    fused(x)
    explicit(x)
    explicit.set_weights(fused.get_weights())
    output, grads = output_and_gradients(fused, x, mask=mask)
    expected, expected_grads = output_and_gradients(explicit, x, mask=mask)
    assert_allclose(output, expected, atol=1e-5)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert_allclose(grad, expected_grad, atol=1e-5)


def test_fused_path_with_attention_mask_and_its_fallbacks(monkeypatch):
    calls = _counting_fused_calls(monkeypatch)
    x = _inputs()
    attention_mask = np.random.default_rng(2).random((2, 7, 7)) > 0.5
    attention_mask[0, 3] = False  # a row with no key
    layer = MultiHeadSelfAttention(2, 4)
    layer(x)
    calls.clear()
    output = to_numpy(layer(x, attention_mask=attention_mask))
    reference = self_attention_reference(x, layer, attention_mask[:, None])[0]
    assert_allclose(output, reference, atol=1e-5)
    assert len(calls) == 1
    # Dropout in training, or value_dim != key_dim, keep the explicit path.
    MultiHeadSelfAttention(2, 4, dropout=0.5)(x, training=True)
    MultiHeadSelfAttention(2, 4, value_dim=3)(x)
    assert len(calls) == 1


def test_fused_path_under_mixed_precision_matches_the_float32_softmax_path():
    """Under mixed precision the fused path agrees with the explicit float32 softmax."""
    layer = MultiHeadSelfAttention(2, 4, attention_pattern="causal", dtype="mixed_float16")
    x = _inputs() * 4.0  # sharp attention
    fused = to_numpy(layer(x))
    explicit = to_numpy(layer(x, return_attention_scores=True)[0])
    assert fused.dtype == np.float16
    assert_allclose(fused.astype("float32"), explicit.astype("float32"), atol=2e-2, rtol=1e-2)


def test_float16_training_step_compiles_on_the_cpu():
    """JAX's fused attention in float16 does not compile on CPU: the explicit path runs it."""
    layer = MultiHeadSelfAttention(2, 4, dtype="mixed_float16")
    inputs = keras.Input((7, 8))
    model = keras.Model(inputs, layer(inputs))
    model.compile("sgd", "mse", jit_compile=keras.backend.backend() != "torch")
    loss = model.train_on_batch(_inputs(), np.zeros((2, 7, 8)))
    assert model.jit_compile is (keras.backend.backend() != "torch")
    assert np.isfinite(loss)


# Not the default 1 / sqrt(4) = 0.5 of `key_dim=4`.
QK_SCALE = 1.3


@pytest.mark.parametrize("pattern", ["dense", "causal"])
def test_qk_scale_matches_numpy_reference(pattern):
    """With scores (the explicit path) the logits are `qk_scale * q . k`."""
    x = _inputs()
    layer = _built(attention_pattern=pattern, qk_scale=QK_SCALE)
    output, weights = layer(x, return_attention_scores=True)
    allowed = np.tri(7, dtype=bool) if pattern == "causal" else None
    expected, expected_weights = self_attention_reference(x, layer, allowed, qk_scale=QK_SCALE)
    assert_allclose(output, expected, atol=1e-5)
    assert_allclose(weights, expected_weights, atol=1e-6)
    # The default scale gives other weights: the argument is not ignored.
    default_weights = self_attention_reference(x, layer, allowed)[1]
    assert np.abs(to_numpy(weights) - default_weights).max() > 1e-2
    assert layer.query_key_scale == QK_SCALE
    assert MultiHeadSelfAttention.from_config(layer.get_config()).qk_scale == QK_SCALE


@pytest.mark.parametrize("pattern", ["dense", "causal"])
def test_qk_scale_fused_path_equals_the_explicit_path(pattern, monkeypatch):
    calls = _counting_fused_calls(monkeypatch)
    x = _inputs()
    mask = np.ones((2, 7), bool)
    mask[1, 4:] = False
    layer = _built(attention_pattern=pattern, qk_scale=QK_SCALE)
    calls.clear()
    fused = to_numpy(layer(x, mask=mask))
    assert calls == [pattern == "causal"]
    explicit = to_numpy(layer(x, mask=mask, return_attention_scores=True)[0])
    assert len(calls) == 1
    assert_allclose(fused, explicit, atol=1e-5)
    allowed = mask[:, None, None, :]
    if pattern == "causal":
        allowed = allowed & np.tri(7, dtype=bool)
    assert_allclose(
        fused, self_attention_reference(x, layer, allowed, qk_scale=QK_SCALE)[0], atol=1e-5
    )


@pytest.mark.parametrize("path", ["shifted", "gathered"])
def test_qk_scale_applies_to_sparse_patterns(path):
    x = _inputs(shape=(2, 9, 8))
    pattern = CausalWindowPattern(window=3)
    if path == "gathered":
        pattern.static_offsets = lambda length: None  # as for a length known only at run time
    layer = _built(attention_pattern=pattern, qk_scale=QK_SCALE)
    allowed = to_numpy(pattern.dense_mask(9))
    expected = self_attention_reference(x, layer, allowed, qk_scale=QK_SCALE)[0]
    assert_allclose(layer(x), expected, atol=1e-5)


def test_qk_scale_must_be_a_positive_number():
    with pytest.raises(ValueError, match="Received: qk_scale=0.0"):
        MultiHeadSelfAttention(2, 4, qk_scale=0.0)
    with pytest.raises(ValueError, match="Received: qk_scale=True"):
        MultiHeadSelfAttention(2, 4, qk_scale=True)
    assert MultiHeadSelfAttention(2, 4, qk_scale=np.float32(0.25)).get_config()["qk_scale"] == 0.25
