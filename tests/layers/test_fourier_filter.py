import numpy as np
import pytest

from keras_attn.layers import FourierFilter
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import allclose, assert_allclose, to_numpy

pytestmark = pytest.mark.backend_agnostic

CHECKS = LayerChecks(
    FourierFilter,
    {"cutoff": 3, "dropout": 0.1},
    input_shape=(2, 6, 8),
    num_params=8 + 2 * 8,  # beta, then the norm's scale and offset
    bad_init_kwargs=[
        {"cutoff": 0},
        {"cutoff": 2.5},
        {"dropout": 1.0},
        {"layer_norm_epsilon": 0.0},
        {"layer_norm_epsilon": -1e-12},
    ],
)


test_layer_contract = LayerChecks.contract_test(CHECKS)


def _inputs(shape=(2, 7, 4), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _layer_norm(x, gamma, beta, epsilon):
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def _low_pass_reference(x, kept_bins):
    spectrum = np.fft.rfft(x, axis=1, norm="ortho")  # (batch, length // 2 + 1, dim)
    spectrum[:, kept_bins:] = 0.0
    return np.fft.irfft(spectrum, n=x.shape[1], axis=1, norm="ortho")


def _filter_reference(x, layer):
    low = _low_pass_reference(x, layer.cutoff // 2 + 1)
    beta = to_numpy(layer.sqrt_beta) ** 2
    norm = layer.layer_norm
    return _layer_norm(
        x + low + beta * (x - low),
        to_numpy(norm.gamma),
        to_numpy(norm.beta),
        layer.layer_norm_epsilon,
    )


def _built(cutoff, x, seed=1):
    layer = FourierFilter(cutoff=cutoff, layer_norm_epsilon=1e-6)
    layer(x)
    rng = np.random.default_rng(seed)
    layer.layer_norm.gamma.assign(rng.normal(size=x.shape[-1]).astype("float32"))
    layer.layer_norm.beta.assign(rng.normal(size=x.shape[-1]).astype("float32"))
    return layer


@pytest.mark.parametrize("length", [7, 8])
@pytest.mark.parametrize("cutoff", [1, 3, 5])
def test_matches_numpy_reference(length, cutoff):
    x = _inputs((2, length, 4))
    layer = _built(cutoff, x)
    assert_allclose(
        to_numpy(layer.low_pass(x)),
        _low_pass_reference(x, cutoff // 2 + 1),
        atol=1e-5,
    )
    assert_allclose(layer(x), _filter_reference(x, layer), atol=1e-4)


@pytest.mark.parametrize("length", [1, 8])
def test_static_length_matrix_matches_the_direct_transform(length):
    """A static length filters by one precomputed matrix, an unknown one by the direct transform."""
    x = _inputs((2, length, 4))
    layer = _built(5, x)
    matrix = layer._low_pass_matrix(length)  # (length, length)
    assert matrix.shape == (length, length)
    assert_allclose(np.einsum("ts,bsd->btd", matrix, x), _low_pass_reference(x, 3), atol=1e-6)
    assert_allclose(layer._dynamic_low_pass(x), layer.low_pass(x), atol=1e-5)


def test_keeps_cutoff_half_plus_one_bins():
    assert [FourierFilter(cutoff=c).kept_bins for c in (1, 2, 3, 4, 5)] == [1, 2, 2, 3, 3]


def test_cutoff_zero_frequency_only_gives_the_sequence_mean():
    x = _inputs()
    low = to_numpy(_built(1, x).low_pass(x))
    assert_allclose(low, np.broadcast_to(x.mean(1, keepdims=True), x.shape), atol=1e-6)


def test_no_energy_above_the_kept_bins():
    x = _inputs((2, 12, 4))
    layer = _built(5, x)  # keeps bins 0, 1, 2 of 7
    spectrum = np.fft.rfft(to_numpy(layer.low_pass(x)), axis=1)
    assert_allclose(np.abs(spectrum[:, 3:]), 0.0, atol=1e-5)
    assert_allclose(spectrum[:, :3], np.fft.rfft(x, axis=1)[:, :3], atol=1e-5)


@pytest.mark.parametrize("length", [7, 8])
def test_cutoff_covering_all_bins_gives_low_equal_to_inputs(length):
    x = _inputs((2, length, 4))
    layer = _built(2 * length, x)
    assert_allclose(to_numpy(layer.low_pass(x)), x, atol=1e-5)
    # Nothing is left for beta to scale: the output is LayerNorm(2x) for any beta.
    layer.sqrt_beta.assign(np.full(4, 3.0, "float32"))
    expected = to_numpy(layer.layer_norm(2.0 * x))
    assert_allclose(layer(x), expected, atol=1e-5)


def test_beta_one_returns_layer_norm_of_twice_the_inputs():
    x = _inputs()
    layer = _built(3, x)
    layer.sqrt_beta.assign(np.array([1.0, -1.0, 1.0, -1.0], "float32"))  # beta = 1
    expected = to_numpy(layer.layer_norm(2.0 * x))
    assert_allclose(layer(x), expected, atol=1e-5)


def test_beta_is_the_square_of_a_learnable_per_channel_weight():
    x = _inputs()
    layer = _built(1, x)
    assert [w.name for w in layer.trainable_weights][0] == "sqrt_beta"
    assert tuple(layer.sqrt_beta.shape) == (4,)
    # beta = 0 keeps the low frequencies only.
    layer.sqrt_beta.assign(np.zeros(4, "float32"))
    low = to_numpy(layer.low_pass(x))
    expected = to_numpy(layer.layer_norm(low + x))
    assert_allclose(layer(x), expected, atol=1e-5)


def test_filter_is_not_causal():
    x = _inputs()
    layer = _built(3, x)
    changed = x.copy()
    changed[:, -1] += 1.0
    assert not allclose(layer(changed)[:, 0], layer(x)[:, 0], atol=1e-3)


def test_dropout_only_in_training():
    x = _inputs()
    layer = FourierFilter(cutoff=3, dropout=0.5, seed=2)
    assert_allclose(layer(x), layer(x, training=False))
    assert not allclose(layer(x, training=True), layer(x))


def test_rank_two_input_is_rejected():
    with pytest.raises(ValueError, match="Received: input_shape"):
        FourierFilter()(np.ones((2, 8), "float32"))
