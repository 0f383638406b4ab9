"""The training helpers: the curve of `fit_with_test_curve`, the recipe's schedule, and
`build_optimizer`, which makes TensorFlow trace the first training step once."""

import keras
import numpy as np
import pytest

from keras_attn.datasets import AugmentedImages
from keras_attn.utils.training import (
    WARMUP_COSINE_ADAMW,
    build_optimizer,
    fit_with_test_curve,
    inference_function,
    reset_optimizer,
    step_losses,
    warmup_cosine_adamw,
)


def test_one_curve_point_per_epoch_and_the_final_accuracy_on_the_test_set():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(32, 6, 6, 1)).astype("float32")
    labels = (images.mean(axis=(1, 2, 3)) > 0).astype("int32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6, 6, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    batches = AugmentedImages(images, labels, 8, steps_per_epoch=2, max_shift=0, flip=False)
    curve, test = (images[:8], labels[:8]), (images[8:], labels[8:])
    run = fit_with_test_curve(model, batches, 3, curve, test)
    assert len(run["test_accuracy"]) == len(run["train_accuracy"]) == 3
    assert run["seconds"] > 0
    # The curve reads the curve images, the final figure the test images.
    predicted = model.predict(images, verbose=0).argmax(-1)
    assert run["test_accuracy"][-1] == np.float32(np.mean(predicted[:8] == labels[:8]))
    assert run["final_test_accuracy"] == np.float32(np.mean(predicted[8:] == labels[8:]))


def test_warmup_cosine_adamw_rises_over_a_tenth_of_the_steps_then_decays_to_zero():
    optimizer = warmup_cosine_adamw(100)
    rates = {}
    for step in (0, 5, 10, 55, 100):
        optimizer.iterations.assign(step)
        rates[step] = float(optimizer.learning_rate)
    peak = WARMUP_COSINE_ADAMW["learning_rate"]
    np.testing.assert_allclose(
        [rates[0], rates[5], rates[10], rates[55], rates[100]],
        [0.0, peak / 2, peak, peak / 2, 0.0],  # linear warm-up, then half a cosine over 90 steps
        atol=1e-9,
    )
    assert optimizer.weight_decay == WARMUP_COSINE_ADAMW["weight_decay"]


def _traces_of_the_first_fit(prebuilt):
    """How many times `fit` runs the Python training step: once per trace on TensorFlow."""
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile(keras.optimizers.Adam(0.1), "mse", jit_compile=True)
    if prebuilt:
        build_optimizer(model)
    calls = []
    step = model.train_step
    model.train_step = lambda data: calls.append(1) or step(data)
    model.fit(np.ones((4, 3)), np.zeros((4, 2)), batch_size=2, epochs=2, verbose=0)
    return len(calls), model.get_weights()


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="tf.function traces")
def test_build_optimizer_makes_the_first_fit_trace_once_with_the_same_result():
    traces, weights = _traces_of_the_first_fit(prebuilt=True)
    default_traces, default_weights = _traces_of_the_first_fit(prebuilt=False)
    assert (traces, default_traces) == (1, 2)  # 4 steps: the step runs only when traced
    for built, default in zip(weights, default_weights, strict=True):
        np.testing.assert_array_equal(built, default)


def test_build_optimizer_leaves_an_unbuilt_model_to_fit():
    model = keras.Sequential([keras.layers.Dense(2)])  # no input shape: no weights yet
    model.compile("adam", "mse")
    assert not build_optimizer(model).optimizer.built
    model.fit(np.ones((4, 3)), np.zeros((4, 2)), verbose=0)  # fit builds both
    assert model.optimizer.built


def test_reset_optimizer_sets_the_iterations_and_moments_back_to_zero():
    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    model.compile("adam", "mse")
    assert reset_optimizer(model) is model  # not built yet: left alone
    model.fit(np.ones((4, 3)), np.zeros((4, 2)), batch_size=4, verbose=0)
    assert int(model.optimizer.iterations) == 1
    reset_optimizer(model)
    assert all(not np.any(keras.ops.convert_to_numpy(v)) for v in model.optimizer.variables)


@pytest.mark.backend_agnostic
def test_inference_function_runs_on_every_backend():
    """The test verses are scored by a function of the backend, not a TensorFlow one."""
    inputs = {"x": keras.Input((3,)), "head_mask": keras.Input((2,))}
    outputs = keras.layers.Dense(2)(keras.layers.Concatenate()([inputs["x"], inputs["head_mask"]]))
    model = keras.Model(inputs, outputs)
    x = {"x": np.ones((4, 3), "float32"), "head_mask": np.ones((4, 2), "float32")}
    scores = keras.ops.convert_to_numpy(inference_function(model)(x))
    np.testing.assert_allclose(scores, keras.ops.convert_to_numpy(model(x)), rtol=1e-6)


def test_step_losses_are_the_running_loss_after_each_step_in_order():
    # A model that predicts 0 and does not learn: batch losses are mean(y ** 2) = 1, 9, 0.
    model = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    x = np.ones((6, 2), "float32")
    y = np.array([[1], [1], [3], [3], [0], [0]], "float32")
    np.testing.assert_allclose(step_losses(model, x, y, 2), [1.0, 5.0, 10.0 / 3.0], rtol=1e-6)


def _non_learning_model(**compile_options):
    model = keras.Sequential(
        [keras.Input((2,)), keras.layers.Dense(1, use_bias=False, kernel_initializer="zeros")]
    )
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse", **compile_options)
    return model


@pytest.mark.backend_agnostic
def test_step_losses_give_every_step_of_a_model_compiled_for_several_steps_per_execution():
    """`fit` reports the loss once per execution: 2 values for 8 steps at 4 steps per execution."""
    x = np.ones((8, 2), "float32")
    y = np.array([[1], [3], [0], [2], [1], [3], [0], [2]], "float32")
    expected = np.cumsum(y[:, 0] ** 2) / np.arange(1, 9)  # the running mean of the batch losses
    on_torch = keras.backend.backend() == "torch"
    model = _non_learning_model(steps_per_execution=4, jit_compile=not on_torch)
    np.testing.assert_allclose(step_losses(model, x, y, 1), expected, rtol=1e-6)
    assert model.steps_per_execution == 4
    if on_torch:  # Keras' torch trainer refuses more than one step per execution
        return
    reported = []
    record = keras.callbacks.LambdaCallback(on_train_batch_end=lambda b, logs: reported.append(b))
    model.fit(x, y, batch_size=1, epochs=1, shuffle=False, callbacks=[record], verbose=0)
    assert reported == [3, 7]  # the model trains 4 steps per execution again
    assert int(model.optimizer.iterations) == 16  # all 8 steps of each epoch
