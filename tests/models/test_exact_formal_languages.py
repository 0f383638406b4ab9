"""The exact PARITY and FIRST transformers of Chiang & Cholak (2022)."""

import keras
import numpy as np
import pytest

from keras_attn.datasets import all_bit_strings, make_bit_strings
from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.models import build_exact_first_transformer, build_exact_parity_transformer
from keras_attn.testing.arrays import assert_reloads

BUILDERS = {"parity": build_exact_parity_transformer, "first": build_exact_first_transformer}
# sqrt(dim / 2) of the mirrored stream: the result after the last layer norm.
NORMALISED_RESULT = {"parity": np.sqrt(10.0), "first": np.sqrt(6.0)}


def _logits(model, tokens, chunk=1024):
    return np.concatenate(
        [np.asarray(model(tokens[i : i + chunk]))[:, 0] for i in range(0, len(tokens), chunk)]
    )


def _cross_entropy_bits(logits, labels):
    signed = np.where(labels > 0.5, logits, -logits)
    return float(np.mean(np.logaddexp(0.0, -signed.astype("float64"))) / np.log(2.0))


@pytest.fixture(scope="module", params=[(task, ln) for task in BUILDERS for ln in (False, True)])
def exact_model(request):
    task, layer_norm = request.param
    return task, layer_norm, BUILDERS[task](layer_norm=layer_norm)


def test_all_strings_up_to_length_12_are_classified_correctly(exact_model):
    task, _, model = exact_model
    for length in range(1, 13):
        tokens, labels = all_bit_strings(length, task)
        logits = _logits(model, tokens, chunk=4096)
        np.testing.assert_array_equal(logits > 0, labels > 0.5, err_msg=f"n={length}")


@pytest.mark.parametrize("length", [100, 1000])
def test_random_long_strings_are_classified_correctly(exact_model, length):
    task, _, model = exact_model
    tokens, labels = make_bit_strings(32, length, task, seed=length)
    np.testing.assert_array_equal(_logits(model, tokens, chunk=16) > 0, labels > 0.5)


@pytest.mark.parametrize("task", list(BUILDERS))
def test_cross_entropy_tends_to_one_bit_without_layer_norm(task):
    model = BUILDERS[task]()
    entropies = []
    for length in (5, 50, 500):
        tokens, labels = make_bit_strings(64, length, task, seed=length)
        entropies.append(_cross_entropy_bits(_logits(model, tokens), labels))
    assert entropies[0] < entropies[1] < entropies[2] < 1.0
    assert entropies[2] > 0.95


@pytest.mark.parametrize("task", list(BUILDERS))
def test_layer_norm_with_zero_epsilon_gives_the_same_cross_entropy_at_every_length(task):
    model = BUILDERS[task](layer_norm=True, layer_norm_epsilon=0.0)
    # Every logit is exactly +-sqrt(dim / 2), so the cross-entropy is
    # -log2 sigmoid(sqrt(10)) = 0.0598 bits for PARITY at every length.
    expected = -np.log2(1.0 / (1.0 + np.exp(-NORMALISED_RESULT[task])))
    for length in (3, 30, 300):
        tokens, labels = make_bit_strings(32, length, task, seed=length)
        logits = _logits(model, tokens)
        np.testing.assert_allclose(np.abs(logits), NORMALISED_RESULT[task], rtol=1e-4)
        np.testing.assert_allclose(_cross_entropy_bits(logits, labels), expected, rtol=1e-3)
    if task == "parity":
        assert abs(expected - 0.0598) < 1e-3


def test_layer_norm_epsilon_makes_the_cross_entropy_grow_with_length():
    model = build_exact_parity_transformer(layer_norm=True, layer_norm_epsilon=1e-5)
    entropies = []
    for length in (5, 50, 500):
        tokens, labels = make_bit_strings(32, length, "parity", seed=length)
        entropies.append(_cross_entropy_bits(_logits(model, tokens), labels))
    assert entropies[0] < entropies[1] < entropies[2]


@pytest.mark.parametrize("task", list(BUILDERS))
def test_cross_entropy_goes_to_zero_as_the_output_scale_grows(task):
    tokens, labels = make_bit_strings(16, 200, task, seed=0)
    entropies = [
        _cross_entropy_bits(
            _logits(BUILDERS[task](layer_norm=True, output_scale=s), tokens), labels
        )
        for s in (1.0, 4.0, 16.0)
    ]
    assert entropies[0] > entropies[1] > entropies[2]
    assert entropies[2] < 1e-10


def _layer_norm_scale(squares, epsilon, dim=12):
    """Factor by which a zero-mean layer norm multiplies a vector of `dim` entries."""
    return 1.0 / np.sqrt(squares / dim + epsilon)


def _hand_first_layer_norm_logit(bits, attention_scale, epsilon, output_scale=1.0):
    """Logit of the layer-norm FIRST model on `bits`, computed by hand.

    Every position holds a few entries `+-v` of the mirrored 12-dimensional
    stream, so each layer norm is a scalar factor. Layer 1's attention is
    zero; its ReLU `[i = 1] - bit0 - CLS` fires only at position 1 holding 1.
    """
    n = len(bits)
    single = _layer_norm_scale(2.0, epsilon)  # one symbol per half: CLS and positions >= 2
    cls = single * _layer_norm_scale(2.0 * single**2, epsilon)
    first = _layer_norm_scale(4.0, epsilon)  # bit and [i = 1] at position 1
    if bits[0] == 1:  # the ReLU adds `first` to dim 4: three entries per half
        key = first * _layer_norm_scale(6.0 * first**2, epsilon)
        value = 0.5 * key  # -key / 2 + key
    else:  # two entries per half
        key = first * _layer_norm_scale(4.0 * first**2, epsilon)
        value = -0.5 * key
    logit = attention_scale * cls * key / np.sqrt(12.0)  # the other n positions have logit 0
    weight = np.exp(logit) / (np.exp(logit) + n)
    result = weight * value
    result *= _layer_norm_scale(2.0 * (cls**2 + result**2), epsilon)
    # Layer 2's network cancels every dimension but the result (two entries +-result).
    return output_scale * result * _layer_norm_scale(2.0 * result**2, epsilon)


FIGURE_SCALES = (1.0, 10.0, 100.0)


@pytest.mark.parametrize("attention_scale", FIGURE_SCALES)
@pytest.mark.parametrize("epsilon", [0.0, 1e-5])
def test_first_with_layer_norm_matches_the_hand_computation(attention_scale, epsilon):
    model = build_exact_first_transformer(
        layer_norm=True, layer_norm_epsilon=epsilon, attention_scale=attention_scale
    )
    for length in range(1, 9):
        tokens, labels = all_bit_strings(length, "first")
        logits = _logits(model, tokens, chunk=4096)
        expected = np.array(
            [_hand_first_layer_norm_logit(t[1:], attention_scale, epsilon) for t in tokens]
        )
        np.testing.assert_array_equal(logits > 0, labels > 0.5, err_msg=f"n={length}")
        np.testing.assert_allclose(
            1.0 / (1.0 + np.exp(-logits)), 1.0 / (1.0 + np.exp(-expected)), atol=1e-5
        )


def test_first_layer_norm_fails_with_the_no_layer_norm_detector():
    # The ReLU(bit1 + [i = 1] - 1) of the model without layer norm also fires
    # after the layer norm rescales position 1 holding a 0 (by sqrt(3)) and
    # every later 1 (by sqrt(6)), which flips decisions at scale 1.
    model = build_exact_first_transformer(layer_norm=True)
    hidden = model.get_layer("layer_1_mlp_hidden")
    kernel = np.zeros((12, 1), "float32")
    kernel[[1, 3]] = 1.0
    hidden.kernel.assign(kernel)
    hidden.bias.assign(np.array([-1.0], "float32"))
    tokens, labels = all_bit_strings(5, "first")
    assert np.mean((_logits(model, tokens) > 0) != (labels > 0.5)) > 0.25


def test_models_are_built_from_the_attention_core_and_save(tmp_path):
    model = build_exact_parity_transformer(layer_norm=True)
    attention = [layer for layer in model.layers if isinstance(layer, MultiHeadSelfAttention)]
    assert [layer.num_heads for layer in attention] == [2, 2]
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.LayerNormalization)]
    assert len(norms) == 4 and all(norm.epsilon == 0.0 for norm in norms)
    tokens, _ = make_bit_strings(4, 9, "parity", seed=1)
    assert_reloads(model, tokens, tmp_path / "parity.keras", atol=1e-6)


def test_model_compiles_with_xla():
    model = build_exact_first_transformer()
    model.compile(jit_compile=True)
    tokens, labels = make_bit_strings(8, 20, "first", seed=2)
    logits = model.predict(tokens, verbose=0)[:, 0]
    assert model.jit_compile is True
    np.testing.assert_array_equal(logits > 0, labels > 0.5)
    np.testing.assert_allclose(logits, _logits(model, tokens), atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"layer_norm_epsilon": -1.0}, "layer_norm_epsilon=-1.0"),
        ({"output_scale": 0.0}, "output_scale=0.0"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=f"Received: {message}"):
        build_exact_parity_transformer(**kwargs)
