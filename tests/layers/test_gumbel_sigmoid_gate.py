import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import GumbelSigmoidGate
from keras_attn.testing import LayerChecks

pytestmark = pytest.mark.backend_agnostic

CHECKS = LayerChecks(
    GumbelSigmoidGate,
    {"units": 3, "temperature": 2.0, "threshold": 0.6, "seed": 1},
    input_shape=(2, 6, 8),
    expected_output_shape=(2, 6, 3),
    num_params=(8 + 1) * 3,
    bad_init_kwargs=[
        {"units": 0},
        {"temperature": 0.0},
        {"threshold": 1.0},
        {"tempered_inference": "yes"},
    ],
)


test_layer_contract = LayerChecks.contract_test(CHECKS)


def _inputs(shape=(4, 5, 8), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def test_inference_thresholds_the_plain_sigmoid():
    gate = GumbelSigmoidGate(3, temperature=5.0, threshold=0.6)
    x = _inputs()
    decisions = ops.convert_to_numpy(gate(x))
    kernel, bias = (ops.convert_to_numpy(w) for w in (gate.kernel, gate.bias))
    expected = 1.0 / (1.0 + np.exp(-(x @ kernel + bias))) > 0.6
    np.testing.assert_array_equal(decisions, expected.astype("float32"))
    assert 0 < decisions.mean() < 1


def test_tempered_inference_thresholds_the_sigmoid_of_the_logits_over_the_temperature():
    x = _inputs()
    plain = GumbelSigmoidGate(3, temperature=5.0, threshold=0.6, seed=0)
    tempered = GumbelSigmoidGate(3, temperature=5.0, threshold=0.6, tempered_inference=True)
    tempered.build(x.shape)
    plain.build(x.shape)
    tempered.set_weights([w * 8 for w in plain.get_weights()])  # logits across ±4
    plain.set_weights(tempered.get_weights())
    kernel, bias = tempered.get_weights()
    logits = x @ kernel + bias
    expected = 1.0 / (1.0 + np.exp(-logits / 5.0)) > 0.6  # logit > 5 ln 1.5 ≈ 2.03
    decisions = ops.convert_to_numpy(tempered(x))
    np.testing.assert_array_equal(decisions, expected.astype("float32"))
    assert 0 < decisions.mean() < ops.convert_to_numpy(plain(x)).mean()  # fewer than plain


@pytest.mark.parametrize("bias, temperature, threshold", [(0.0, 5.0, 0.5), (3.0, 5.0, 0.6)])
def test_training_keep_rate_is_logistic(bias, temperature, threshold):
    # g1 - g2 is Logistic(0, 1): a decision is on with probability
    # sigmoid(bias - temperature * logit(threshold)).
    gate = GumbelSigmoidGate(
        1,
        temperature=temperature,
        threshold=threshold,
        kernel_initializer="zeros",
        bias_initializer=keras.initializers.Constant(bias),
        seed=3,
    )
    decisions = ops.convert_to_numpy(gate(np.zeros((40000, 2), "float32"), training=True))
    assert set(np.unique(decisions)) <= {0.0, 1.0}
    shift = bias - temperature * np.log(threshold / (1 - threshold))
    assert abs(decisions.mean() - 1.0 / (1.0 + np.exp(-shift))) < 0.01


def test_straight_through_gradient_is_the_sigmoid_gradient():
    import tensorflow as tf

    if keras.backend.backend() != "tensorflow":
        pytest.skip("Uses a TensorFlow gradient tape.")
    temperature = 4.0
    gate = GumbelSigmoidGate(5, temperature=temperature, kernel_initializer="zeros", seed=2)
    x = np.ones((1000, 2), "float32")
    gate(x)
    with tf.GradientTape() as tape:
        decisions = gate(x, training=True)
    gradient = tape.gradient(decisions, gate.bias).numpy()  # sum of s (1 - s) / τ
    values = decisions.numpy()
    assert set(np.unique(values)) == {0.0, 1.0}
    # Every soft value lies in (0, 1), so each term is in (0, 1 / (4 τ)].
    assert np.all(gradient > 0) and np.all(gradient <= 1000 / (4 * temperature))
    # Logistic noise: E[s (1 - s)] with s = sigmoid(L / τ) is well above zero.
    assert np.all(gradient / 1000 > 0.5 / (4 * temperature))
