"""The attention core on hostile inputs: garbage in padding and in the future,
float16 overflow, heads of size 1 and masks of the wrong shape in traced graphs."""

import re

import keras
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keras_attn.layers import (
    CausalWindowPattern,
    ConvolutionalSelfAttention,
    LogSparseAttention,
    MultiHeadSelfAttention,
)
from keras_attn.testing.arrays import assert_allclose, to_numpy
from keras_attn.testing.reference import self_attention_reference

pytestmark = pytest.mark.backend_agnostic

BACKEND = keras.backend.backend()
# JAX compiles every eager op again for each new shape, so it draws fewer examples.
SETTINGS = settings(
    max_examples=4 if BACKEND == "jax" else 10,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def _gathered_window():
    pattern = CausalWindowPattern(window=3)
    pattern.static_offsets = lambda length: None  # as for a length known only at run time
    return pattern


LAYERS = {
    "dense": lambda **kw: MultiHeadSelfAttention(2, 4, **kw),
    "causal": lambda **kw: MultiHeadSelfAttention(2, 4, attention_pattern="causal", **kw),
    "window": lambda **kw: MultiHeadSelfAttention(
        2, 4, attention_pattern=CausalWindowPattern(3), **kw
    ),
    "gathered": lambda **kw: MultiHeadSelfAttention(
        2, 4, attention_pattern=_gathered_window(), **kw
    ),
    "log_sparse": lambda **kw: LogSparseAttention(2, 4, variant="local", local_window=2, **kw),
    "log_sparse_conv": lambda **kw: LogSparseAttention(2, 4, kernel_size=3, **kw),
    "convolutional": lambda **kw: ConvolutionalSelfAttention(2, 4, kernel_size=3, **kw),
}
GARBAGE = (np.nan, np.inf, -np.inf)


def _inputs(shape=(2, 7, 8), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _outputs(layer, x, mask, scores):
    """The output, from the fused path or (with scores) the explicit one."""
    if scores:
        return to_numpy(layer(x, mask=mask, return_attention_scores=True)[0])
    return to_numpy(layer(x, mask=mask))


@SETTINGS
@given(
    name=st.sampled_from(sorted(LAYERS)),
    length=st.integers(2, 9),
    mask_bits=st.lists(st.booleans(), min_size=18, max_size=18),
    cut=st.integers(0, 8),
    garbage=st.sampled_from(GARBAGE),
    scores=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_garbage_in_padding_or_the_future_reaches_no_real_output(
    name, length, mask_bits, cut, garbage, scores, seed
):
    layer = LAYERS[name]()
    x = _inputs((2, length, 8), seed)
    mask = np.array(mask_bits[: 2 * length], bool).reshape(2, length)
    dirty = np.where(mask[..., None], x, garbage).astype("float32")
    # The outputs that must not change: real queries, and with a causal
    # pattern those before `cut`, whose future is garbage too.
    checked = mask.copy()
    if name != "dense":
        cut = min(cut, length - 1)
        dirty[:, cut + 1 :] = garbage
        checked[:, cut + 1 :] = False
    clean = _outputs(layer, x, mask, scores)
    output = _outputs(layer, dirty, mask, scores)
    assert np.isfinite(output[checked]).all()
    np.testing.assert_allclose(output[checked], clean[checked], atol=1e-5)


def _sees(layer, length, position):
    """Boolean `(length,)`: the queries whose keys or values read `inputs[:, position]`."""
    pattern = layer.attention_pattern
    if pattern == "dense":
        return np.ones(length, bool)
    if pattern == "causal":
        allowed = np.tri(length, dtype=bool)
    else:
        allowed = to_numpy(pattern.dense_mask(length))
    # A convolution of kernel k puts the input into the keys of k positions.
    reach = getattr(layer, "kernel_size", 1)
    return allowed[:, position : position + reach].any(-1)


@pytest.mark.parametrize("name", sorted(LAYERS))
@pytest.mark.parametrize("scores", [False, True])
def test_a_visible_nan_still_reaches_the_outputs_that_see_it(name, scores):
    """Hiding garbage from the queries that must not see it hides nothing else."""
    layer = LAYERS[name]()
    x = _inputs((2, 9, 8))
    x[:, 3] = np.nan
    output = _outputs(layer, x, None, scores)
    sees = _sees(layer, 9, 3)
    assert sees.sum() >= 3
    assert np.isnan(output[:, sees]).all()
    assert np.isfinite(output[:, ~sees]).all()


def test_attention_mask_hides_garbage_from_the_queries_that_do_not_see_it():
    layer = MultiHeadSelfAttention(2, 4)
    x = _inputs()
    attention_mask = np.ones((2, 7, 7), bool)
    attention_mask[:, :4, 5] = False  # queries 0..3 do not see key 5
    dirty = x.copy()
    dirty[:, 5] = np.inf
    for scores in (False, True):
        kwargs = {"attention_mask": attention_mask, "return_attention_scores": scores}
        clean = to_numpy(keras.tree.flatten(layer(x, **kwargs))[0])
        output = to_numpy(keras.tree.flatten(layer(dirty, **kwargs))[0])
        assert_allclose(output[:, :4], clean[:, :4], atol=1e-6)
        assert np.isnan(output[:, 4:]).all()


def test_additive_mask_hides_only_the_padding_that_is_not_finite():
    """Official masking: a query with no visible key attends over finite padding."""
    layer = MultiHeadSelfAttention(2, 4, attention_pattern="causal", additive_mask=-10000.0)
    x = _inputs()
    mask = np.array([[0, 0, 0, 1, 1, 1, 1], [1, 1, 1, 1, 1, 0, 0]], bool)
    dirty = x.copy()
    dirty[0, 1] = np.nan
    dirty[1, 6] = -np.inf
    for scores in (False, True):
        clean = _outputs(layer, x, mask, scores)
        output = _outputs(layer, dirty, mask, scores)
        assert_allclose(output[0, 3:], clean[0, 3:], atol=1e-5)
        assert_allclose(output[1, :6], clean[1, :6], atol=1e-5)
        # The padded queries 0 and 2 see no key: they attend over every
        # finite position, padded ones included, so the finite padding
        # still moves them.
        assert np.isfinite(output[0, [0, 2]]).all()
        moved = layer(np.where(mask[..., None], x, x + 1.0), mask=mask)
        assert np.abs(to_numpy(moved)[0, :3] - clean[0, :3]).max() > 1e-3


@pytest.mark.parametrize(
    "name", ["dense", "causal", "causal_scores", "window", "gathered", "log_sparse_conv"]
)
def test_mixed_float16_logits_and_softmax_run_in_float32(name):
    """Logits of large inputs overflow float16 (65504); the core computes them in float32."""
    make = LAYERS[name.removesuffix("_scores")]
    x = _inputs() * 300.0
    full = make()
    full(x)
    mixed = make(dtype="mixed_float16")
    mixed(x)
    mixed.set_weights(full.get_weights())
    scores = name.endswith("_scores")
    output = _outputs(mixed, x, None, scores)
    expected = _outputs(full, x, None, scores)
    assert output.dtype == np.float16
    assert np.isfinite(output).all()
    # float16 rounds the projections to 1e-3 relative.
    assert_allclose(output.astype("float32"), expected, atol=2e-2 * np.abs(expected).max())


@pytest.mark.parametrize("head_dims", [(1, 4), (4, 1), (1, 1)])
def test_heads_of_size_one_with_as_many_heads_as_positions(head_dims):
    """Keras' TensorFlow `ops.add` added a `(heads, 1)` bias along the length axis."""
    key_dim, value_dim = head_dims
    x = _inputs((2, 3, 8))
    layer = MultiHeadSelfAttention(
        3, key_dim, value_dim=value_dim, bias_initializer="random_normal"
    )
    layer(x)
    expected = self_attention_reference(x, layer)[0]
    assert_allclose(layer(x), expected, atol=1e-5)
    inputs = keras.Input((3, 8))
    model = keras.Model(inputs, layer(inputs))
    assert_allclose(model.predict(x, verbose=0), expected, atol=1e-5)


def test_keras_multi_head_attention_still_adds_a_head_bias_along_the_length_on_tensorflow():
    """Tells when Keras fixes its bias add: `add_bias` of the core can then go."""
    x = _inputs((2, 3, 8))
    layer = keras.layers.MultiHeadAttention(3, 1, bias_initializer="random_normal")
    layer(x, x)
    error = np.abs(to_numpy(layer(x, x)) - self_attention_reference(x, layer)[0]).max()
    if BACKEND != "tensorflow":
        assert error < 1e-5
        return
    assert error > 1e-2, (
        "keras.layers.MultiHeadAttention now adds a (heads, 1) bias correctly on "
        "TensorFlow: Keras fixed `ops.add`, and the core's `add_bias` can go."
    )


WRONG_MASKS = [
    ("mask", np.ones((2, 9), bool)),
    ("mask", np.ones((2, 1), bool)),
    ("attention_mask", np.ones((2, 3, 5), bool)),
    ("head_mask", np.ones((1, 2), "float32")),
]


@pytest.mark.parametrize(("argument", "value"), WRONG_MASKS)
@pytest.mark.parametrize("jit_compile", [False, True])
def test_masks_of_the_wrong_shape_fail_in_a_graph_of_unknown_sizes(argument, value, jit_compile):
    if BACKEND != "tensorflow":
        pytest.skip("TensorFlow traces graphs with unknown sizes.")
    import tensorflow as tf

    layer = MultiHeadSelfAttention(2, 4)
    x = _inputs((2, 5, 8))
    layer(x)
    specs = {
        "mask": tf.TensorSpec((None, None), tf.bool),
        "attention_mask": tf.TensorSpec((None, None, None), tf.bool),
        "head_mask": tf.TensorSpec((None, None), tf.float32),
    }
    step = tf.function(
        lambda x, masks: layer(x, **masks),
        input_signature=[tf.TensorSpec((None, None, 8)), {argument: specs[argument]}],
        jit_compile=jit_compile,
    )
    right = {"mask": (2, 5), "attention_mask": (2, 5, 5), "head_mask": (2, 2)}[argument]
    good = np.ones(right, value.dtype)
    assert_allclose(step(x, {argument: good}), layer(x, **{argument: good}), atol=1e-5)
    # XLA drops assertions: there the check's reshape fails, in a scope named after the argument.
    message = f"{argument}_shape_check" if jit_compile else _graph_message(argument, right, value)
    with pytest.raises(tf.errors.InvalidArgumentError, match=message) as error:
        step(x, {argument: value})
    assert "StringFormat" not in str(error.value)  # no op that XLA cannot compile


def _graph_message(argument, right, value):
    """The assertion's message, the sizes as TensorFlow prints them: `[2 5]`."""
    expected, received = (" ".join(map(str, shape)) for shape in (right, value.shape))
    return re.escape(
        f"[`{argument}` must have shape] [{expected}] [Received: {argument}.shape=] [{received}]"
    )


@pytest.mark.parametrize(("argument", "value"), WRONG_MASKS)
def test_masks_of_the_wrong_shape_fail_under_jax_jit(argument, value):
    if BACKEND != "jax":
        pytest.skip("JAX's jit.")
    import jax

    layer = MultiHeadSelfAttention(2, 4)
    x = _inputs((2, 5, 8))
    layer(x)
    step = jax.jit(lambda x, masks: layer(x, **masks))
    with pytest.raises(ValueError, match=f"`{argument}` must have shape.*Received"):
        step(x, {argument: value})
