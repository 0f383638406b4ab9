"""The official AdaViT training options of `finetune_adavit`: the gates' learning-rate
scale and the teacher's distillation."""

import keras
import numpy as np
import pytest

from keras_attn.models import build_vision_transformer, finetune_adavit
from keras_attn.models.adavit.training import _distillation_loss
from keras_attn.testing import quick_jit_compile
from keras_attn.utils.training import scale_learning_rates

pytestmark = pytest.mark.backend_agnostic


def _numpy(x):
    return keras.ops.convert_to_numpy(x)


@pytest.mark.parametrize("optimizer", ["SGD", "Adam"])
def test_scaled_learning_rate_one_step_by_hand(optimizer):
    scaled, other = keras.Variable([1.0, -2.0]), keras.Variable([0.5, 0.5])
    opt = scale_learning_rates(getattr(keras.optimizers, optimizer)(0.1), [([scaled], 3.0)])
    opt.apply([keras.ops.convert_to_tensor([2.0, -4.0]), keras.ops.ones(2)], [scaled, other])
    # SGD: w - lr * factor * g. Adam's first step: w - lr * factor * g / (|g| + eps').
    step = np.array([2.0, -4.0]) if optimizer == "SGD" else np.sign([2.0, -4.0])
    np.testing.assert_allclose(_numpy(scaled), [1.0, -2.0] - 0.3 * step, rtol=1e-5)
    np.testing.assert_allclose(_numpy(other), [0.5, 0.5] - 0.1 * np.ones(2), rtol=1e-5)


def test_scaled_learning_rate_in_a_compiled_fit_step():
    # A linear model y = x·w, loss mean((x·w - 0)^2) over one example x = (1, 2):
    # gradient 2·(x·w)·x = 2·3·(1, 2) at w = (1, 1); the kernel's factor is 0.5.
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1, use_bias=False)])
    model.layers[0].kernel.assign(np.ones((2, 1)))
    optimizer = scale_learning_rates(keras.optimizers.SGD(0.01), [(model.trainable_variables, 0.5)])
    model.compile(optimizer, "mse", jit_compile=keras.backend.backend() != "torch")
    model.fit(np.array([[1.0, 2.0]]), np.zeros((1, 1)), epochs=1, verbose=0)
    np.testing.assert_allclose(
        _numpy(model.layers[0].kernel)[:, 0], 1 - 0.01 * 0.5 * 6 * np.array([1, 2]), rtol=1e-5
    )


def test_scale_learning_rates_refuses_a_factor_that_is_not_positive():
    with pytest.raises(ValueError, match="Received: factor=0"):
        scale_learning_rates(keras.optimizers.SGD(0.1), [([], 0)])


def test_distillation_loss_by_numpy():
    # Logits of the student and the teacher; the loss takes their probabilities.
    student = np.array([[1.0, -0.5, 2.0], [0.0, 3.0, -1.0]])
    teacher = np.array([[0.5, 0.5, 1.0], [-2.0, 1.0, 4.0]])
    labels = np.array([2, 0])

    def softmax(z):
        e = np.exp(z - z.max(-1, keepdims=True))
        return e / e.sum(-1, keepdims=True)

    tau, weight = 5.0, 0.5
    hard = -np.log(softmax(student)[np.arange(2), labels])
    soft = -(softmax(teacher / tau) * np.log(softmax(student / tau))).sum(-1)
    targets = np.concatenate([labels[:, None], softmax(teacher)], axis=1).astype("float32")
    loss = _distillation_loss(weight, tau)(targets, softmax(student).astype("float32"))
    np.testing.assert_allclose(_numpy(loss), hard + weight * soft, rtol=1e-5)


def _data():
    rng = np.random.default_rng(0)
    return rng.normal(size=(16, 8, 8)).astype("float32"), np.arange(16) % 3


def _finetune(epochs, **options):
    keras.utils.set_random_seed(0)
    # Two blocks: one gated block carries every kind of gate, at one compilation of few blocks.
    vit = build_vision_transformer((8, 8), 3, patch_size=4, hidden_dim=8, num_layers=2, num_heads=2)
    x, y = _data()
    # One step: the whole data set in one batch.
    return finetune_adavit(
        vit,
        x,
        y,
        0.5,
        epochs,
        batch_size=16,
        learning_rate=0.01,
        jit_compile=quick_jit_compile(),
        **options,
    )


def _gate_weights(model):
    kinds = (model.patch_gates, model.head_gates, model.block_gates)
    return [[_numpy(v) for gate in kind for v in gate.weights] for kind in kinds]


def _backbone_weights(model):
    return [_numpy(v) for v in model.backbone.weights]


@pytest.mark.usefixtures("eager_tensorflow_steps")
def test_gate_learning_rate_scale_multiplies_the_gates_first_update():
    start = _finetune(0)  # the initial weights: same seed, no step
    plain = _finetune(1)  # the default Adam at the learning rate 0.01
    # A given Adam at twice the rate, with the gates' factors: it, not the default, trains.
    scales = (2.0, 3.0, 0.5)
    given = keras.optimizers.Adam(0.02)
    scaled = _finetune(1, optimizer=given, gate_learning_rate_scale=scales)
    assert scaled.optimizer is given and int(scaled.optimizer.iterations) == 1
    # Adam's step is linear in the learning rate: each kind moves `2 * scale` times as far.
    for kind, scale in enumerate(scales):
        weights = (_gate_weights(m)[kind] for m in (start, plain, scaled))
        for w0, w1, ws in zip(*weights, strict=True):
            assert np.abs(w1 - w0).max() > 1e-4  # the gates learn
            np.testing.assert_allclose(ws - w0, 2 * scale * (w1 - w0), rtol=1e-3, atol=1e-7)
    # The backbone moves twice as far as with the default (to a thousandth of a step of 0.02:
    # Adam's first step of a gradient near its epsilon follows rounding noise).
    weights = (_backbone_weights(m) for m in (start, plain, scaled))
    for w0, w1, ws in zip(*weights, strict=True):
        np.testing.assert_allclose(ws - w0, 2 * (w1 - w0), rtol=1e-5, atol=2e-5)


# Two XLA fits of AdaViT fine-tuning: a minute or more on a busy CPU.
@pytest.mark.slow
def test_distillation_changes_training_and_leaves_a_label_loss():
    plain = _finetune(1)
    distilled = _finetune(1, distillation_weight=0.5, distillation_temperature=2.0)
    assert distilled.loss == "sparse_categorical_crossentropy"
    assert distilled.jit_compile == quick_jit_compile()  # compiled again as asked
    x, y = _data()
    loss, accuracy = distilled.evaluate(x, y, verbose=0)  # labels alone, as before
    assert np.isfinite(loss) and 0 <= accuracy <= 1
    moved = [
        np.abs(a - b).max()
        for a, b in zip(_backbone_weights(plain), _backbone_weights(distilled), strict=True)
    ]
    assert max(moved) > 1e-5


# A repetition with another optimizer class: in the default run,
# test_gate_learning_rate_scale_multiplies_the_gates_first_update trains a given Adam with
# the gates' factors.
@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_a_given_optimizer_trains_with_the_gate_scale():
    # The given optimizer trains, with the gates' factor: SGD's first step of the head
    # gates at scale 0.5 is half the step at scale 1, from the same gradient.
    start = _finetune(0)
    sgd = _finetune(1, optimizer=keras.optimizers.SGD(0.1), gate_learning_rate_scale=0.5)
    assert isinstance(sgd.optimizer, keras.optimizers.SGD) and int(sgd.optimizer.iterations) == 1
    plain = _finetune(1, optimizer=keras.optimizers.SGD(0.1))
    for w0, w1, ws in zip(
        _gate_weights(start)[1], _gate_weights(plain)[1], _gate_weights(sgd)[1], strict=True
    ):
        assert np.abs(w1 - w0).max() > 1e-6
        np.testing.assert_allclose(ws - w0, 0.5 * (w1 - w0), rtol=1e-3, atol=1e-8)


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("optimizer", "adam"),
        ("gate_learning_rate_scale", 0.0),
        ("gate_learning_rate_scale", (1.0, 2.0)),
        ("distillation_weight", -1.0),
        ("distillation_temperature", 0.0),
        ("jit_compile", "yes"),
    ],
)
def test_bad_recipe_options(option, value):
    vit = build_vision_transformer((8, 8), 3, patch_size=4, hidden_dim=8, num_layers=2, num_heads=2)
    before = [w.copy() for w in vit.get_weights()]
    x, y = _data()
    with pytest.raises(ValueError, match=f"Received: {option}="):
        finetune_adavit(vit, x, y, 0.5, 1, **{option: value})
    for old, new in zip(before, vit.get_weights(), strict=True):
        np.testing.assert_array_equal(old, new)
