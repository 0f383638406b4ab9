import keras
import numpy as np
import pytest

from keras_attn.layers import (
    CausalWindowPattern,
    ConvolutionalSelfAttention,
    LogSparseAttention,
    LogSparsePattern,
    MultiHeadSelfAttention,
)
from keras_attn.layers.attention_pattern import AttentionPattern
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import allclose, assert_allclose, assert_array_equal, to_numpy
from keras_attn.testing.gradients import output_and_gradients
from keras_attn.testing.reference import attention_num_params, self_attention_reference

pytestmark = pytest.mark.backend_agnostic

PATTERNS = {
    "pure": LogSparsePattern("pure"),
    "local_1": LogSparsePattern("local", local_window=1),
    "local_5": LogSparsePattern("local", local_window=5),
    "restart_2": LogSparsePattern("restart", subsequence_length=2),
    "restart_24": LogSparsePattern("restart", subsequence_length=24),
}

CHECKS = {
    "pure": LayerChecks(
        LogSparseAttention,
        {"num_heads": 2, "key_dim": 4, "logit_scale": "log_length"},
        input_shape=(2, 6, 8),
        num_params=attention_num_params(8, 2, 4),
    ),
    "logsparse_conv": LayerChecks(
        LogSparseAttention,
        {
            "num_heads": 2,
            "key_dim": 4,
            "variant": "local",
            "local_window": 2,
            "kernel_size": 3,
            "dropout": 0.1,
        },
        input_shape=(2, 9, 8),
        extra_inputs={"head_mask": (2,)},
        num_params=attention_num_params(8, 2, 4, kernel_size=3),
        bad_init_kwargs=[
            {"variant": "dense"},
            {"local_window": None},
            {"local_window": 0},
            {"subsequence_length": 4},
            {"kernel_size": 0},
            {"attention_pattern": "causal"},
        ],
        # The gather path's float32 softmax; the other variants run the same
        # float ops with other offsets.
        mixed_precision_on_jax=True,
    ),
    "restart": LayerChecks(
        LogSparseAttention,
        {"num_heads": 2, "key_dim": 4, "variant": "restart", "subsequence_length": 3},
        input_shape=(2, 10, 8),
        extra_inputs={"head_mask": (2,)},
        num_params=attention_num_params(8, 2, 4),
        bad_init_kwargs=[{"subsequence_length": 1}, {"variant": "pure"}],
    ),
    "conv_causal": LayerChecks(
        ConvolutionalSelfAttention,
        {"num_heads": 2, "key_dim": 4, "kernel_size": 4, "output_dim": 5},
        input_shape=(2, 7, 8),
        expected_output_shape=(2, 7, 5),
        num_params=attention_num_params(8, 2, 4, output_dim=5, kernel_size=4),
        bad_init_kwargs=[{"kernel_size": 1.5}, {"kernel_size": True}, {"num_heads": 0}],
    ),
}


test_layer_contract = LayerChecks.contract_test(CHECKS)


def _inputs(shape=(2, 33, 8), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _numpy(tensor):
    return to_numpy(tensor)


def _expected_mask(pattern, length):
    """The pattern written out from the paper's definition, one cell at a time."""
    mask = np.zeros((length, length), bool)
    for query in range(length):
        if pattern.variant == "pure":
            steps = [0] + [2**j for j in range(12) if 2**j <= query]
        elif pattern.variant == "local":
            window = pattern.local_window
            steps = list(range(window)) + [window - 1 + 2**j for j in range(12)]
        else:
            size = pattern.subsequence_length
            inside = [0] + [2**j for j in range(12) if 2**j < size]
            steps = [start + step for start in range(0, length, size) for step in inside]
        for step in steps:
            if 0 <= query - step:
                mask[query, query - step] = True
    return mask


# JAX compiles every eager op again for each new shape: it checks the
# lengths around the powers of two, the other backends more.
DEFINITION_LENGTHS = (1, 2, 3, 7, 8, 9, 40, 64, 65)
if keras.backend.backend() == "jax":
    DEFINITION_LENGTHS = (1, 8, 9, 65)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pattern_matches_the_paper_definition(name):
    pattern = PATTERNS[name]
    for length in DEFINITION_LENGTHS:
        assert_array_equal(_numpy(pattern.dense_mask(length)), _expected_mask(pattern, length))


# Every length up to 70, and around each power of two and each multiple of
# 24 (the restart subsequence) up to 1024: where the key counts change.
EDGE_LENGTHS = sorted(
    set(range(1, 71))
    | {2**k + d for k in range(6, 11) for d in (-1, 0, 1)}
    | {24 * m + d for m in (5, 17, 42) for d in (-1, 0, 1)}
)
# JAX compiles every eager op again for each new shape, about 0.2 s a length.
# The offsets are Python ints, the same on every backend; TensorFlow and torch
# check every edge length, JAX the edges of each kind.
if keras.backend.backend() == "jax":
    EDGE_LENGTHS = [1, 2, 3, 4, 5, 6, 23, 24, 25, 63, 64, 65, 1023, 1024, 1025]


def _max_keys(pattern, length):
    bits = (length - 1).bit_length()
    if pattern.variant == "pure":
        return bits + 1
    if pattern.variant == "local":
        return pattern.local_window + max(length - pattern.local_window, 0).bit_length()
    size = pattern.subsequence_length
    return -(-length // size) * ((size - 1).bit_length() + 1)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_pattern_is_causal_never_empty_and_logarithmic_up_to_1024(name):
    pattern = PATTERNS[name]
    for length in EDGE_LENGTHS:
        indices, valid = (_numpy(t) for t in pattern.key_indices(length))
        queries = np.arange(length)[:, None]
        assert indices.shape == valid.shape == (length, _max_keys(pattern, length))
        assert np.all((indices >= 0) & (indices < length))
        # No future key is reachable, and every row sees at least itself.
        assert np.all(indices[valid] <= np.broadcast_to(queries, indices.shape)[valid])
        assert np.all(valid[:, 0]) and np.all(indices[:, 0] == queries[:, 0])
        # Distinct keys per row: a key gathered twice would count twice.
        keyed = np.where(valid, indices, -1 - np.arange(indices.shape[1]))
        assert np.all(np.diff(np.sort(keyed, axis=1), axis=1) != 0)
    if pattern.variant != "restart":
        assert indices.shape[1] <= 2 * np.log2(1024) + 5


def test_key_counts_are_logarithmic():
    assert _numpy(PATTERNS["pure"].offsets(8192)).tolist() == [0] + [2**j for j in range(13)]
    assert len(_numpy(PATTERNS["local_5"].offsets(8192))) == 5 + 13
    # Restart: ceil(L / S) subsequences of floor(log2(S - 1)) + 2 keys.
    assert len(_numpy(PATTERNS["restart_24"].offsets(100))) == 5 * 6


def test_log2_layers_of_pure_logsparse_reach_the_whole_past():
    # A distance d is a sum of popcount(d) powers of two: bit_length(L - 1)
    # stacked layers (<= floor(log2 L) + 1, the paper's bound) reach every
    # earlier cell; one layer fewer misses distance 2^k - 1.
    length = 128
    mask = _numpy(PATTERNS["pure"].dense_mask(length)).astype(np.int64)
    past = np.tril(np.ones((length, length), np.int64))
    reach = np.eye(length, dtype=np.int64)
    for _ in range((length - 1).bit_length() - 1):
        reach = np.minimum(reach @ mask, 1)
    assert reach[length - 1, 0] == 0 and not np.array_equal(reach, past)
    assert_array_equal(np.minimum(reach @ mask, 1), past)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_logsparse_attention_equals_dense_attention_under_the_mask(name):
    pattern = PATTERNS[name]
    config = pattern.get_config()
    layer = LogSparseAttention(num_heads=2, key_dim=4, **config)
    x = _inputs()
    output, weights = layer(x, return_attention_scores=True)
    allowed = _numpy(pattern.dense_mask(x.shape[1]))
    expected, expected_weights = self_attention_reference(x, layer, allowed)
    assert_allclose(output, expected, atol=1e-5)
    # The gathered weights scattered back to dense positions.
    indices, valid = (_numpy(t) for t in pattern.key_indices(x.shape[1]))
    dense = np.zeros_like(expected_weights)
    rows = np.broadcast_to(np.arange(x.shape[1])[:, None], indices.shape)
    np.add.at(
        dense, (slice(None), slice(None), rows[valid], indices[valid]), _numpy(weights)[..., valid]
    )
    assert_allclose(dense, expected_weights, atol=1e-6)


def _conv_attention_reference(x, layer, allowed):
    """Numpy convolutional attention: causal Conv1D queries and keys."""
    k = layer.kernel_size
    padded = np.pad(x, ((0, 0), (k - 1, 0), (0, 0)))
    windows = np.stack([padded[:, i : i + x.shape[1]] for i in range(k)], axis=2)  # (b, l, k, c)
    q = np.einsum("blkc,kchd->blhd", windows, _numpy(layer.query_dense.kernel))  # (b, l, h, d)
    key = np.einsum("blkc,kchd->blhd", windows, _numpy(layer.key_dense.kernel))  # (b, l, h, d)
    q, key = q + _numpy(layer.query_dense.bias), key + _numpy(layer.key_dense.bias)
    v = np.einsum("blc,chd->blhd", x, _numpy(layer.value_dense.kernel))  # (b, l, h, d)
    v = v + _numpy(layer.value_dense.bias)
    logits = np.einsum("bqhd,bkhd->bhqk", q, key) / np.sqrt(layer.key_dim)  # (b, h, q, k)
    logits = np.where(allowed, logits, -1e30)
    weights = np.exp(logits - logits.max(-1, keepdims=True)) * allowed
    weights /= weights.sum(-1, keepdims=True)
    context = np.einsum("bhqk,bkhd->bqhd", weights, v)  # (b, l, h, d)
    wo, bo = _numpy(layer.output_dense.kernel), _numpy(layer.output_dense.bias)
    return np.einsum("bqhd,hdc->bqc", context, wo) + bo  # (b, l, c)


@pytest.mark.parametrize("name", ["pure", "local_5", "restart_24"])
def test_convolutional_logsparse_matches_numpy_reference(name):
    pattern = PATTERNS[name]
    layer = LogSparseAttention(num_heads=2, key_dim=4, kernel_size=5, **pattern.get_config())
    x = _inputs()
    output = layer(x)
    allowed = _numpy(pattern.dense_mask(x.shape[1]))
    assert_allclose(output, _conv_attention_reference(x, layer, allowed), atol=1e-5)
    # Same as the dense convolutional layer with the pattern as attention mask.
    dense = ConvolutionalSelfAttention(num_heads=2, key_dim=4, kernel_size=5)
    dense(x)
    dense.set_weights(layer.get_weights())
    masked = dense(x, attention_mask=np.broadcast_to(allowed, (2, *allowed.shape)))
    assert_allclose(output, masked, atol=1e-5)


def _convolutional_and_canonical(kernel_size):
    """The inputs, and a convolutional and a causal canonical layer built on them."""
    x = _inputs()
    conv = ConvolutionalSelfAttention(num_heads=2, key_dim=4, kernel_size=kernel_size)
    canonical = MultiHeadSelfAttention(num_heads=2, key_dim=4, attention_pattern="causal")
    conv(x)
    canonical(x)
    return x, conv, canonical


def test_kernel_size_one_is_canonical_attention():
    x, conv, canonical = _convolutional_and_canonical(kernel_size=1)
    assert conv.query_dense.kernel.shape == canonical.query_dense.kernel.shape == (8, 2, 4)
    canonical.set_weights(conv.get_weights())
    assert_allclose(conv(x), canonical(x), atol=1e-6)
    allowed = np.tril(np.ones((33, 33), bool))
    assert_allclose(conv(x), self_attention_reference(x, conv, allowed)[0], atol=1e-5)


def test_convolution_with_only_the_current_tap_is_canonical_attention():
    x, conv, canonical = _convolutional_and_canonical(kernel_size=3)
    for dense in (conv.query_dense, conv.key_dense):
        kernel = _numpy(dense.kernel)
        kernel[:2] = 0.0  # taps on the two previous positions
        dense.kernel.assign(kernel)
    weights = conv.get_weights()
    canonical.set_weights([w[-1] if w.ndim == 4 else w for w in weights])
    assert_allclose(conv(x), canonical(x), atol=1e-5)
    # With the earlier taps the outputs differ: the convolution is really used.
    conv.query_dense.kernel.assign(np.ones(conv.query_dense.kernel.shape) * 0.1)
    assert not allclose(conv(x), canonical(x), atol=1e-3)


@pytest.mark.parametrize("name", sorted(PATTERNS))
def test_no_output_depends_on_a_later_input(name):
    layer = LogSparseAttention(num_heads=2, key_dim=4, kernel_size=4, **PATTERNS[name].get_config())
    x = _inputs()
    output = _numpy(layer(x))
    for position in (0, 5, 20):
        changed = x.copy()
        changed[:, position:] = 50.0
        assert_allclose(_numpy(layer(changed))[:, :position], output[:, :position], atol=1e-5)


def test_padding_mask_removes_gathered_keys():
    x = _inputs(shape=(2, 12, 8))
    mask = np.ones((2, 12), bool)
    mask[0, 8:] = False
    pattern = PATTERNS["pure"]
    layer = LogSparseAttention(num_heads=2, key_dim=4)
    allowed = _numpy(pattern.dense_mask(12))[None, None] & mask[:, None, None, :]
    assert_allclose(layer(x, mask=mask), self_attention_reference(x, layer, allowed)[0], atol=1e-5)


def test_logsparse_config_names_the_variant():
    layer = LogSparseAttention(num_heads=2, key_dim=4, variant="local", local_window=3)
    config = layer.get_config()
    assert "attention_pattern" not in config
    assert (config["variant"], config["local_window"], config["subsequence_length"]) == (
        "local",
        3,
        None,
    )
    assert layer.variant == "local"
    assert LogSparseAttention.from_config(config).attention_pattern.local_window == 3


def test_bad_pattern_arguments_name_the_argument():
    with pytest.raises(ValueError, match="Received: variant='log'"):
        LogSparsePattern("log")
    with pytest.raises(ValueError, match="Received: local_window=None"):
        LogSparsePattern("local")
    with pytest.raises(ValueError, match="Received: subsequence_length=8"):
        LogSparsePattern("local", local_window=2, subsequence_length=8)


def test_no_length_by_length_tensor_in_the_compiled_training_step():
    if keras.backend.backend() != "tensorflow":
        pytest.skip("Reads the TensorFlow XLA HLO.")
    import tensorflow as tf

    length = 1536
    x = tf.random.normal((1, length, 8))

    def hlo(layer):
        layer(x)

        @tf.function(jit_compile=True)
        def step(x):
            with tf.GradientTape() as tape:
                loss = tf.reduce_sum(tf.square(layer(x)))
            return tape.gradient(loss, layer.trainable_variables)

        return step.experimental_get_compiler_ir(x)(stage="hlo")

    square = f"{length},{length}"
    dense = ConvolutionalSelfAttention(num_heads=2, key_dim=4, kernel_size=3)
    dense.blockwise_min_length = 2 * length  # the explicit causal path, not the blockwise one
    assert square in hlo(dense)
    assert square not in hlo(LogSparseAttention(num_heads=2, key_dim=4, kernel_size=3))


def test_symbolic_call_with_scores_gives_the_key_slot_count():
    x = keras.Input(shape=(20, 8))
    layer = LogSparseAttention(num_heads=2, key_dim=4, variant="local", local_window=3)
    output, scores = layer(x, return_attention_scores=True)
    assert output.shape == (None, 20, 8) and scores.shape == (None, 2, 20, 3 + 5)
    dense = ConvolutionalSelfAttention(num_heads=2, key_dim=4, kernel_size=2, output_dim=6)
    output, scores = dense(keras.Input(shape=(None, 8)), return_attention_scores=True)
    assert output.shape == (None, None, 6) and scores.shape == (None, 2, None, None)


OFFSET_PATTERNS = {**PATTERNS, "window_3": CausalWindowPattern(window=3)}


class _Gathered(AttentionPattern):
    """The same key slots without offsets: the core gathers them."""

    def __init__(self, pattern):
        self.pattern = pattern

    def key_indices(self, length):
        return self.pattern.key_indices(length)


@pytest.mark.parametrize("name", sorted(OFFSET_PATTERNS))
def test_static_offsets_give_the_key_indices(name):
    pattern = OFFSET_PATTERNS[name]
    for length in (1, 2, 3, 7, 24, 25, 64, 100):
        offsets = to_numpy(pattern.static_offsets(length))
        indices, valid = (_numpy(t) for t in pattern.key_indices(length))
        keys = np.arange(length)[:, None] - offsets[None, :]
        assert_array_equal(valid, keys >= 0)
        assert_array_equal(indices[valid], keys[keys >= 0])
    assert pattern.static_offsets(keras.ops.convert_to_tensor(8)) is None


# The shifted views and their custom gradient are one code path for every
# pattern; JAX, where each eager op compiles, checks one pattern of each kind.
GRADIENT_PATTERNS = sorted(OFFSET_PATTERNS)
if keras.backend.backend() == "jax":
    GRADIENT_PATTERNS = ["local_5", "restart_24", "window_3"]


# torch has a native offset kernel: its reference runs too.
IMPLEMENTATIONS = ["auto", "reference"] if keras.backend.backend() == "torch" else ["auto"]


@pytest.mark.parametrize("implementation", IMPLEMENTATIONS)
@pytest.mark.parametrize("name", GRADIENT_PATTERNS)
def test_shifted_attention_equals_gathered_attention_with_gradients(name, implementation):
    """The offset kernel (shifted views, custom gradient) against the gathered keys."""
    x = np.random.default_rng(0).normal(size=(2, 37, 8)).astype("float32")
    mask = np.ones((2, 37), bool)
    mask[0, :5] = False  # the first rows of example 0 see no key at all
    mask[1, 10:20] = False
    shifted = MultiHeadSelfAttention(
        2, 4, attention_pattern=OFFSET_PATTERNS[name], implementation=implementation
    )
    shifted.shifted_sparse_keys = True  # torch's reference gathers below 1,024 positions
    gathered = MultiHeadSelfAttention(2, 4, attention_pattern=_Gathered(OFFSET_PATTERNS[name]))
    shifted(x)
    gathered(x)
    gathered.set_weights(shifted.get_weights())
    output, grads = output_and_gradients(shifted, x, mask=mask)
    expected, expected_grads = output_and_gradients(gathered, x, mask=mask)
    assert_allclose(output, expected, atol=1e-5)
    bias = _numpy(shifted.output_dense.bias)  # rows with no key: zero context
    assert_array_equal(output[0, :5], np.broadcast_to(bias, output[0, :5].shape))
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        assert_allclose(grad, expected_grad, atol=1e-5)
    _, shifted_scores = shifted(x, mask=mask, return_attention_scores=True)
    _, gathered_scores = gathered(x, mask=mask, return_attention_scores=True)
    assert_allclose(_numpy(shifted_scores), _numpy(gathered_scores), atol=1e-6)


def _compiled_training_step(pattern, length, implementation="auto"):
    import jax
    import jax.numpy as jnp

    layer = MultiHeadSelfAttention(4, 16, attention_pattern=pattern, implementation=implementation)
    x = jnp.ones((1, length, 64))
    layer(x[:, :8])
    weights = [v.value for v in layer.trainable_variables]

    def loss(weights, x):
        return jnp.sum(jnp.square(layer.stateless_call(weights, [], x)[0]))

    return jax.jit(jax.grad(loss)).lower(weights, x).compile()


def _planned_temp_bytes(pattern, length):
    return _compiled_training_step(pattern, length).memory_analysis().temp_size_in_bytes


def test_training_step_keeps_no_per_slot_copy_of_keys_or_values():
    """XLA's plan for a LogSparse training step holds a few key-sized tensors, not K of them.

    The gathered computation (K = 11 keys per query here) plans about 60 key-sized
    tensors and an unrolled loop over shifted copies about 36; the offset path about 15.
    """
    if keras.backend.backend() != "jax":
        pytest.skip("Reads JAX's compiled memory analysis.")
    length = 1024
    key_sized = length * 4 * 16 * 4  # bytes of one (1, length, heads, head_dim) float32 tensor
    assert _planned_temp_bytes(LogSparsePattern("pure"), length) < 24 * key_sized
    assert _planned_temp_bytes(_Gathered(LogSparsePattern("pure")), length) > 24 * key_sized


@pytest.mark.parametrize(
    ("implementation", "shifted"),
    [("auto", None), ("reference", True), ("reference", False)],
    ids=["native", "reference loop", "gathered"],
)
def test_torch_training_step_reads_no_tensor_back_to_the_host(implementation, shifted):
    """The offset loops slice with Python ints on torch: no `item()` per offset.

    Reading a tensor index back to the host (`aten::item`) synchronizes a GPU
    and cost a LogSparse step tens of milliseconds whatever its length.
    """
    if keras.backend.backend() != "torch":
        pytest.skip("Counts torch operator calls.")
    names = _torch_training_step_ops(implementation, shifted, length=64)
    assert "aten::mul" in names  # the profile saw the step
    assert "aten::item" not in names and "aten::_local_scalar_dense" not in names
    assert ("aten::addcmul_" in names) is (implementation == "auto")  # the native loop ran


def _torch_training_step_ops(implementation, shifted, length):
    """The torch operators of one LogSparse training step."""
    import torch
    from torch.profiler import profile

    layer = LogSparseAttention(num_heads=4, key_dim=16, implementation=implementation)
    layer.shifted_sparse_keys = shifted
    x = torch.randn(1, length, 64)
    layer(x)
    with profile() as prof:
        torch.sum(torch.square(layer(x))).backward()
    return [event.name for event in prof.events() if event.name.startswith("aten::")]


def test_torch_reference_gathers_short_sequences_in_a_few_kernels():
    """Below `TORCH_SHIFTED_MIN_LENGTH` torch's reference gathers the keys: fewer kernels.

    Its loop over 9 offsets launches over 1,100 operators for a step at
    length 256, each through Keras' op dispatch, which cost a fixed ~40 ms
    per step whatever the length; the native loop, on torch tensors
    directly, launches about as many, and the gathered step under 700.
    """
    if keras.backend.backend() != "torch":
        pytest.skip("Counts torch operator calls.")
    assert len(_torch_training_step_ops("reference", None, length=256)) < 700
    assert len(_torch_training_step_ops("reference", True, length=256)) > 1000
    assert len(_torch_training_step_ops("auto", None, length=256)) < 1200


@pytest.mark.parametrize("implementation, loops", [("reference", 4), ("auto", 6)])
def test_training_step_runs_the_offset_sums_as_loops(implementation, loops):
    """Forward: the logits loop and the context loop; backward: one loop per gradient pair
    in the reference, one per gradient in JAX's native kernel. No sum unrolled over slots."""
    if keras.backend.backend() != "jax":
        pytest.skip("Reads JAX's compiled HLO.")
    hlo = _compiled_training_step(LogSparsePattern("pure"), 64, implementation).as_text()
    assert hlo.count(" while(") == loops
