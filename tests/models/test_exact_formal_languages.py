"""The exact PARITY and FIRST transformers of Chiang & Cholak (2022)."""

import keras
import numpy as np
import pytest

from keras_attn.datasets import all_bit_strings, make_bit_strings
from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.models import build_exact_first_transformer, build_exact_parity_transformer
from keras_attn.testing.arrays import assert_reloads

BUILDERS = {"parity": build_exact_parity_transformer, "first": build_exact_first_transformer}
# The official layer-norm code's epsilon, the builders' default.
OFFICIAL_EPSILON = 1e-5
# sqrt(dim / 2) of the mirrored stream: the result after the last layer norm.
NORMALISED_RESULT = {"parity": np.sqrt(10.0), "first": np.sqrt(6.0)}


def _logits(model, tokens, chunk=1024):
    return np.concatenate(
        [
            keras.ops.convert_to_numpy(model(tokens[i : i + chunk]))[:, 0]
            for i in range(0, len(tokens), chunk)
        ]
    )


def _cross_entropy_bits(logits, labels):
    signed = np.where(labels > 0.5, logits, -logits)
    return float(np.mean(np.logaddexp(0.0, -signed.astype("float64"))) / np.log(2.0))


# No layer norm, layer norm at the default epsilon and at the paper's limit, epsilon 0.
MODEL_ARGUMENTS = [{}, {"layer_norm": True}, {"layer_norm": True, "layer_norm_epsilon": 0.0}]


@pytest.fixture(
    scope="module",
    params=[(task, kwargs) for task in BUILDERS for kwargs in MODEL_ARGUMENTS],
    ids=lambda param: f"{param[0]}-{'-'.join(f'{k}={v}' for k, v in param[1].items())}",
)
def exact_model(request):
    task, kwargs = request.param
    return task, BUILDERS[task](**kwargs)


def test_all_strings_up_to_length_12_are_classified_correctly(exact_model):
    task, model = exact_model
    for length in range(1, 13):
        tokens, labels = all_bit_strings(length, task)
        logits = _logits(model, tokens, chunk=4096)
        np.testing.assert_array_equal(logits > 0, labels > 0.5, err_msg=f"n={length}")


@pytest.mark.parametrize("length", [100, 1000])
def test_random_long_strings_are_classified_correctly(exact_model, length):
    task, model = exact_model
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


def test_the_default_epsilon_makes_the_cross_entropy_grow_with_length():
    model = build_exact_parity_transformer(layer_norm=True)
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
            _logits(
                BUILDERS[task](layer_norm=True, layer_norm_epsilon=0.0, output_scale=s), tokens
            ),
            labels,
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


def _numpy_layer_norm(x, epsilon):
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt(np.mean(centred**2, -1, keepdims=True) + epsilon)


def _numpy_attention(x, query, key, value, output, num_heads):
    """Self-attention of `x` `(batch, length, dim)`, kernels `(dim, dim)` with heads in columns."""
    batch, length, dim = x.shape
    size = dim // num_heads

    def heads(kernel):
        return (x @ kernel).reshape(batch, length, num_heads, size)  # (batch, length, heads, size)

    logits = np.einsum("bqhs,bkhs->bhqk", heads(query), heads(key)) / np.sqrt(size)
    weights = np.exp(logits - logits.max(-1, keepdims=True))
    weights /= weights.sum(-1, keepdims=True)  # (batch, heads, length, length)
    attended = np.einsum("bhqk,bkhs->bqhs", weights, heads(value))  # (batch, length, heads, size)
    return attended.reshape(batch, length, dim) @ output


def _numpy_parity_logits(tokens, attention_scale, layer_norm, epsilon):
    """Logits of the official exact PARITY model with `--big attention_scale`, in float64.

    The 10 dimensions of the stream are: bit 0, bit 1, CLS, `i / N`, `(-1)^i`,
    `k / N`, `1 / N`, `[i = k] / N`, the result and an unused one. With layer
    norm the stream is `[x, -x]`: kernels read the first half and write `w`
    and `-w`. Both layers have 2 heads of `dim // 2` dimensions.
    """
    half = 10
    dim = 2 * half if layer_norm else half
    size = dim // 2

    def reads(kernel):  # (10, out) -> (dim, out)
        return np.pad(kernel, ((0, dim - half), (0, 0)))

    def writes(kernel):  # (..., 10) -> (..., dim)
        return np.concatenate([kernel, -kernel], axis=-1) if layer_norm else kernel

    def projection(entries):  # {(row, head, column in head): weight} -> (dim, dim)
        kernel = np.zeros((half, dim))
        for (row, head, column), weight in entries.items():
            kernel[row, head * size + column] = weight
        return reads(kernel)

    def block(x, update):
        x = x + update
        return _numpy_layer_norm(x, epsilon) if layer_norm else x

    batch, length = tokens.shape
    positions = np.arange(length)
    x = np.zeros((batch, length, half))
    x[..., :3] = np.eye(3)[tokens]
    x[..., 3] = positions / length
    x[..., 4] = (-1.0) ** positions
    x = writes(x)  # (batch, length, dim)

    # Layer 1: uniform attention averages the ones and CLS into k / N and 1 / N.
    value = projection({(1, 0, 0): 1.0, (2, 0, 1): 1.0})
    output = np.zeros((dim, half))
    output[0, 5] = output[1, 6] = 1.0
    zero = np.zeros((dim, dim))
    x = block(x, _numpy_attention(x, zero, zero, value, writes(output), 2))
    hidden = np.zeros((half, 3))
    hidden[5], hidden[3], hidden[6] = 1.0, -1.0, [-1.0, 0.0, 1.0]
    mark = np.zeros((3, half))
    mark[:, 7] = [1.0, -2.0, 1.0]
    x = block(x, np.maximum(x @ reads(hidden), 0.0) @ writes(mark))

    # Layer 2: CLS attends to even (head 1) and odd (head 2) positions; odd minus even.
    query = projection({(2, 0, 0): attention_scale, (2, 1, 0): attention_scale})
    key = projection({(4, 0, 0): 1.0, (4, 1, 0): -1.0})
    value = projection({(7, 0, 0): 1.0, (7, 1, 0): 1.0})
    output = np.zeros((dim, half))
    output[0, 8], output[size, 8] = -1.0, 1.0
    x = block(x, _numpy_attention(x, query, key, value, writes(output), 2))
    if layer_norm:  # ReLU(x) - ReLU(-x) = x: the network cancels every dimension but 8
        keep = np.eye(half)
        keep[8, 8] = 0.0
        cancel = np.block([[-keep, keep], [keep, -keep]])  # (dim, dim)
        x = block(x, np.maximum(x, 0.0) @ cancel)
    return x[:, -1, 8]  # the output layer reads the result at CLS


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("attention_scale", [1.0, 3.0, 100.0])
@pytest.mark.parametrize(
    "layer_norm, epsilon", [(False, OFFICIAL_EPSILON), (True, OFFICIAL_EPSILON), (True, 0.0)]
)
def test_parity_attention_scale_matches_the_numpy_construction(
    attention_scale, layer_norm, epsilon
):
    model = build_exact_parity_transformer(
        layer_norm=layer_norm, layer_norm_epsilon=epsilon, attention_scale=attention_scale
    )
    # The last layer norm magnifies the float32 noise of a tiny result before it (about
    # 1e-6 on eight ones at scale 100): by 1 / sqrt(epsilon) at most, and with epsilon 0
    # the logit is +-sqrt(10) to 0.02.
    tolerance = {"atol": 0.02} if epsilon == 0.0 else {"rtol": 1e-4, "atol": 1e-4}
    # Each length is a new shape (a new trace on JAX): every string of a few lengths.
    strings = [all_bit_strings(length, "parity")[0] for length in (1, 2, 3, 8)]
    strings.append(make_bit_strings(8, 100, "parity", seed=3)[0])
    for tokens in strings:
        # Positions other than CLS hold a zero vector before the last layer norm (0 / 0
        # with epsilon 0); only CLS is read.
        with np.errstate(invalid="ignore"):
            expected = _numpy_parity_logits(tokens, attention_scale, layer_norm, epsilon)
        logits = _logits(model, tokens)
        np.testing.assert_allclose(logits, expected, **tolerance, err_msg=f"n={tokens.shape[1]}")
        np.testing.assert_array_equal(logits > 0, expected > 0)


@pytest.mark.parametrize("task", list(BUILDERS))
def test_the_default_epsilon_is_the_official_one(task):
    model = BUILDERS[task](layer_norm=True)
    norms = [layer for layer in model.layers if isinstance(layer, keras.layers.LayerNormalization)]
    assert len(norms) == 4
    assert [norm.epsilon for norm in norms] == [OFFICIAL_EPSILON] * 4


def test_first_layer_norm_fails_with_the_no_layer_norm_detector():
    # The ReLU(bit1 + [i = 1] - 1) of the model without layer norm also fires
    # after the layer norm rescales position 1 holding a 0 (by sqrt(3)) and
    # every later 1 (by sqrt(6)), which flips decisions at scale 1.
    model = build_exact_first_transformer(layer_norm=True, layer_norm_epsilon=0.0)
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
    assert len(norms) == 4
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
        ({"layer_norm_epsilon": float("nan")}, "layer_norm_epsilon=nan"),
        ({"output_scale": 0.0}, "output_scale=0.0"),
        ({"attention_scale": 0.0}, "attention_scale=0.0"),
        ({"attention_scale": -3.0}, "attention_scale=-3.0"),
    ],
)
@pytest.mark.parametrize("task", list(BUILDERS))
def test_bad_arguments(task, kwargs, message):
    with pytest.raises(ValueError, match=f"Received: {message}"):
        BUILDERS[task](layer_norm=True, **kwargs)
