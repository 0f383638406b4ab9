import math

import numpy as np
import pytest

from keras_attn.layers import BSARecBlock, FourierFilter, MultiHeadSelfAttention
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import allclose, assert_allclose, to_numpy
from keras_attn.testing.reference import attention_num_params, self_attention_reference

erf = np.vectorize(math.erf)

pytestmark = pytest.mark.backend_agnostic

CHECKS = LayerChecks(
    BSARecBlock,
    {"num_heads": 2, "alpha": 0.7, "cutoff": 3, "dropout": 0.1, "attention_dropout": 0.1},
    input_shape=(2, 6, 8),
    bad_init_kwargs=[
        {"num_heads": 0},
        {"alpha": 1.5},
        {"alpha": "half"},
        {"cutoff": 0},
        {"intermediate_dim": 0},
        {"dropout": 1.0},
        {"attention_dropout": -0.1},
        {"additive_mask": 1.0},
    ],
    # Filter (beta and norm), attention, its norm, FFN 8 -> 32 -> 8, output norm.
    num_params=8 + 2 * 8 + attention_num_params(8, 2, 4) + 2 * 8 + 9 * 32 + 33 * 8 + 2 * 8,
)


# The final block of a next-item model: only its last two positions are computed.
LAST_POSITIONS_CHECKS = LayerChecks(
    BSARecBlock,
    {**CHECKS.init_kwargs, "last_positions": 2},
    input_shape=(2, 6, 8),
    expected_output_shape=(2, 2, 8),
    dynamic_axes=(),  # the output has last_positions positions whatever the length
    bad_init_kwargs=[{"last_positions": 0}, {"last_positions": 1.5}],
    num_params=CHECKS.num_params,
)

test_layer_contract = LayerChecks.contract_test(
    {"BSARecBlock": CHECKS, "BSARecBlock(last_positions=2)": LAST_POSITIONS_CHECKS}
)


def _inputs(shape=(2, 7, 8), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _layer_norm(x, norm):
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + norm.epsilon) * to_numpy(norm.gamma) + to_numpy(
        norm.beta
    )


def _filter_reference(x, layer):
    spectrum = np.fft.rfft(x, axis=1, norm="ortho")  # (batch, length // 2 + 1, dim)
    spectrum[:, layer.cutoff // 2 + 1 :] = 0.0
    low = np.fft.irfft(spectrum, n=x.shape[1], axis=1, norm="ortho")
    beta = to_numpy(layer.sqrt_beta) ** 2
    return _layer_norm(x + low + beta * (x - low), layer.layer_norm)


def _block_reference(x, block, mask=None):
    """The official block; masked keys get `block.additive_mask` added (`None`: removed)."""
    length = x.shape[1]
    allowed = np.tril(np.ones((length, length), bool))[None, None]
    if mask is not None:
        allowed = allowed & mask[:, None, None, :]
    mixed = 0.0
    if block.uses_filter:
        mixed = block.alpha * _filter_reference(x, block.fourier_filter)
    if block.uses_attention:
        attended = self_attention_reference(
            x, block.attention, allowed, additive_mask=block.additive_mask
        )[0]
        mixed = mixed + (1 - block.alpha) * _layer_norm(attended + x, block.attention_norm)
    dense_1, dense_2 = block.intermediate_dense, block.output_dense
    hidden = mixed @ to_numpy(dense_1.kernel) + to_numpy(dense_1.bias)
    hidden = 0.5 * hidden * (1.0 + erf(hidden / np.sqrt(2.0)))  # exact GELU
    output = hidden @ to_numpy(dense_2.kernel) + to_numpy(dense_2.bias)
    return _layer_norm(output + mixed, block.output_norm)


def _built(alpha, x, **kwargs):
    block = BSARecBlock(num_heads=2, alpha=alpha, cutoff=3, **kwargs)
    block(x)
    rng = np.random.default_rng(3)
    for weight in block.weights:  # non-trivial biases and norms
        weight.assign(weight + 0.1 * rng.normal(size=weight.shape).astype("float32"))
    return block


@pytest.mark.parametrize("alpha", [0.0, 0.3, 1.0])
def test_matches_numpy_reference(alpha):
    x = _inputs()
    block = _built(alpha, x)
    assert_allclose(block(x), _block_reference(x, block), atol=1e-4)


@pytest.mark.parametrize("additive_mask", [-10000.0, None])
def test_matches_numpy_reference_with_left_padding(additive_mask):
    x = _inputs()
    mask = np.array([[0, 0, 0, 1, 1, 1, 1], [1] * 7], bool)
    block = _built(0.6, x, additive_mask=additive_mask)
    assert_allclose(block(x, mask=mask), _block_reference(x, block, mask), atol=1e-4)


def test_padded_queries_attend_over_the_history_by_default():
    """Official masking: a padded query's context is not zero, and changes with the history."""
    x = _inputs()
    mask = np.array([[0, 0, 0, 1, 1, 1, 1]] * 2, bool)
    official = _built(0.0, x)
    exact = _built(0.0, x, additive_mask=None)
    exact.set_weights(official.get_weights())
    assert official.additive_mask == -10000.0
    assert official.attention.additive_mask == -10000.0
    assert_allclose(exact(x, mask=mask)[:, 3:], official(x, mask=mask)[:, 3:], atol=1e-5)
    changed = x.copy()
    changed[:, 3:] += 1.0  # real (future) items change the padded rows only officially
    moved = np.abs(to_numpy(official(changed, mask=mask) - official(x, mask=mask))[:, :3]).max()
    still = np.abs(to_numpy(exact(changed, mask=mask) - exact(x, mask=mask))[:, :3]).max()
    assert moved > 1e-2
    assert still < 1e-5


def test_alpha_selects_the_branches_that_are_built():
    x = _inputs()
    sasrec, mixed, filter_only = (_built(alpha, x) for alpha in (0.0, 0.5, 1.0))
    assert not hasattr(sasrec, "fourier_filter")
    assert isinstance(sasrec.attention, MultiHeadSelfAttention)
    assert sasrec.attention.attention_pattern == "causal"
    assert isinstance(mixed.fourier_filter, FourierFilter)
    assert not hasattr(filter_only, "attention")
    # SASRec's block has no sqrt_beta; BSARec's has one per channel.
    assert len(mixed.weights) == len(sasrec.weights) + 1 + 2  # sqrt_beta, LayerNorm


def test_sasrec_block_is_causal_and_ignores_padded_items():
    x = _inputs()
    block = _built(0.0, x)
    changed = x.copy()
    changed[:, 5:] += 1.0
    assert_allclose(block(changed)[:, :5], block(x)[:, :5], atol=1e-5)
    mask = np.array([[0, 0, 1, 1, 1, 1, 1]] * 2, bool)
    padded = x.copy()
    padded[:, :2] = 50.0
    assert_allclose(block(padded, mask=mask)[:, 2:], block(x, mask=mask)[:, 2:], atol=1e-5)


def test_bsarec_block_sees_the_whole_sequence():
    x = _inputs()
    block = _built(0.5, x)
    changed = x.copy()
    changed[:, 5:] += 1.0
    assert not allclose(block(changed)[:, :5], block(x)[:, :5], atol=1e-3)


def test_default_kernels_are_normal_with_stddev_0_02():
    block = BSARecBlock(num_heads=2)
    block(_inputs((2, 7, 64)))
    kernel = to_numpy(block.intermediate_dense.kernel)
    assert abs(kernel.std() - 0.02) < 2e-3
    assert np.all(to_numpy(block.attention.query_dense.bias) == 0.0)


def test_too_many_heads_are_rejected():
    with pytest.raises(ValueError, match="Received: input_shape"):
        BSARecBlock(num_heads=16)(_inputs((2, 7, 8)))
