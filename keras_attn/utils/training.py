"""The reproductions' training helpers: the vision recipe, its fit with a test-accuracy
curve, and batches for one `fit` call per epoch."""

import time
from typing import Any

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.utils.validation import check_int, check_positive

# Light augmentation, the arguments of `keras_attn.datasets.AugmentedImages`.
LIGHT_AUGMENTATION = {"max_shift": 2, "flip": True}
# The optimizer `warmup_cosine_adamw` builds, as the result files record it.
WARMUP_COSINE_ADAMW = {
    "name": "AdamW",
    "learning_rate": 1e-3,
    "weight_decay": 0.05,
    "schedule": "linear warm-up over the first 10% of the steps, then cosine decay to 0",
}
# The recipe as a result file records it.
RECIPE = {"optimizer": WARMUP_COSINE_ADAMW, "augmentation": LIGHT_AUGMENTATION}


def warmup_cosine_adamw(steps):
    """AdamW as `WARMUP_COSINE_ADAMW` describes it, over `steps` optimizer steps.

    The learning rate rises linearly from 0 over the first 10% of the steps
    (at least one), then decays to 0 along a cosine. The rate is a schedule,
    so the optimizer's state is only its iteration count and moments.

    Args:
        steps: int, the optimizer steps of the whole run.

    Returns:
        a `keras.optimizers.AdamW`.

    Example:

    >>> optimizer = warmup_cosine_adamw(100)
    >>> round(float(optimizer.learning_rate), 6)  # step 0: the warm-up starts at 0
    0.0
    """
    warmup_steps = max(1, steps // 10)
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, steps - warmup_steps),
        warmup_target=WARMUP_COSINE_ADAMW["learning_rate"],
        warmup_steps=warmup_steps,
    )
    return keras.optimizers.AdamW(schedule, weight_decay=WARMUP_COSINE_ADAMW["weight_decay"])


def default_jit_compile() -> bool:
    """`jit_compile` for a run that trains or predicts with XLA where the backend has it.

    `True` on TensorFlow and JAX; `False` on torch, where `jit_compile=True`
    means `torch.compile`, which takes minutes.

    Returns:
        bool, for `Model.compile(jit_compile=...)` or a training helper's
        `jit_compile` argument.

    Example:

    >>> default_jit_compile() == (keras.backend.backend() != "torch")
    True
    """
    return keras.backend.backend() != "torch"


def compile_classifier(model, steps, jit_compile=True, run_eagerly=False):
    """Compiles a classifier of integer labels with `warmup_cosine_adamw(steps)`.

    The loss is the sparse categorical cross-entropy of probabilities and the
    metric `"accuracy"`, as `fit_with_test_curve` reads it.

    Args:
        model: a `keras.Model` ending in a softmax.
        steps: int, the optimizer steps of the whole run.
        jit_compile: bool, whether XLA compiles the training step.
        run_eagerly: bool, whether the training step runs eagerly.

    Returns:
        `model`, for chaining.

    Example:

    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2, "softmax")])
    >>> compile_classifier(model, 100, jit_compile=False).loss
    'sparse_categorical_crossentropy'
    """
    model.compile(
        optimizer=warmup_cosine_adamw(steps),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=jit_compile,
        run_eagerly=run_eagerly,
    )
    return model


def curve_steps(steps, evaluations):
    """The optimizer step of each point of a test-accuracy curve.

    Args:
        steps: int, optimizer steps of the run, a multiple of `evaluations`.
        evaluations: int, the points of the curve, as `fit_with_test_curve`
            measures them (one after each of its epochs).

    Returns:
        list of `evaluations` ints, the last `steps`.

    Example:

    >>> curve_steps(12, 3)
    [4, 8, 12]
    """
    interval = steps // evaluations
    return [interval * (index + 1) for index in range(evaluations)]


def build_optimizer(model):
    """Creates the variables of a compiled, built model's optimizer before `fit`.

    Without a distribution strategy, Keras on TensorFlow creates them inside
    the first training step, so `tf.function` traces that step twice: once
    to create them and once to run. Built beforehand, the step is traced
    once, which saves a trace in the first `fit`. JAX and torch build the
    optimizer before the first step anyway. A model whose weights do not
    exist yet (a subclassed model never called) is left alone: the
    optimizer needs all of them.

    Args:
        model: a compiled `keras.Model`.

    Returns:
        `model`, for chaining.

    Example:

    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> model.compile("adam", "mse")
    >>> build_optimizer(model).optimizer.built
    True
    """
    if model.built and not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    return model


def scale_learning_rates(optimizer, scaled):
    """Multiplies the learning rate of some variables by a factor, on every backend.

    The per-group learning rate of a torch optimizer (the official AdaViT
    code's `--ada-*-lr-scale`) for a Keras optimizer: the update of each
    variable of `scaled` uses the optimizer's learning rate times that
    variable's factor; the others use the learning rate itself. It wraps the
    optimizer's collective update step, which TensorFlow, JAX and torch
    (whose optimizers update all variables at once) all go through. Weight
    decay, which Keras applies before the update, keeps the unscaled rate.

    Args:
        optimizer: a `keras.optimizers.Optimizer`, built or not.
        scaled: sequence of `(variables, factor)` pairs, factor a float > 0.

    Returns:
        `optimizer`, for chaining.

    Example:

    >>> w = keras.Variable(np.ones(2, "float32"))
    >>> optimizer = scale_learning_rates(keras.optimizers.SGD(0.1), [([w], 3.0)])
    >>> optimizer.apply([keras.ops.ones(2)], [w])
    >>> np.round(np.asarray(w), 6).tolist()  # 1 - 3 * 0.1 * 1
    [0.7, 0.7]
    """
    factors = {}
    for variables, factor in scaled:
        check_positive("factor", factor)
        factors.update({id(variable): factor for variable in variables})
    update_step = optimizer._backend_update_step

    def scaled_update_step(grads, trainable_variables, learning_rate):
        groups = {}  # factor: (grads, variables)
        for grad, variable in zip(grads, trainable_variables, strict=True):
            group = groups.setdefault(factors.get(id(variable), 1.0), ([], []))
            group[0].append(grad)
            group[1].append(variable)
        for factor, (group_grads, group_variables) in groups.items():
            update_step(group_grads, group_variables, learning_rate * factor)

    optimizer._backend_update_step = scaled_update_step
    return optimizer


def reset_optimizer(model):
    """Sets every variable of a compiled model's optimizer back to zero.

    With a learning-rate schedule, the state of Adam-family optimizers is
    its iteration count and moments, so after the reset a compiled model
    trains from new weights as a freshly compiled one would, without
    compiling again. An optimizer that is not built yet is left alone.

    Args:
        model: a compiled `keras.Model`.

    Returns:
        `model`, its optimizer back at step 0, for chaining.

    Example:

    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    >>> model.compile(keras.optimizers.SGD(momentum=0.9), "mse")
    >>> _ = model.fit(np.ones((2, 2)), np.ones((2, 1)), verbose=0)
    >>> int(model.optimizer.iterations), int(reset_optimizer(model).optimizer.iterations)
    (1, 0)
    """
    if model.optimizer.built:
        for variable in model.optimizer.variables:
            variable.assign(np.zeros(variable.shape, variable.dtype))
    return model


def fit_with_test_curve(model, batches, evaluations, curve_test, test):
    """Trains `model` for `evaluations` epochs of `batches`, measuring test accuracy.

    After every epoch the accuracy on `curve_test` is measured (the curve);
    after the last, the accuracy on all of `test` (the final figure).

    Args:
        model: a compiled classifier with an `"accuracy"` metric.
        batches: a `keras.utils.PyDataset` (or anything `fit` takes with
            `epochs`) whose epoch is one interval between evaluations.
        evaluations: int, the number of epochs, so of curve points.
        curve_test: `(images, labels)` measured after every epoch.
        test: `(images, labels)` measured once at the end.

    Returns:
        dict with `final_test_accuracy` (float), the curves `test_accuracy`
        and `train_accuracy` (one value per epoch) and the `seconds` the
        training and the evaluations took.

    Example:

    >>> import keras, numpy as np
    >>> from keras_attn.datasets import AugmentedImages
    >>> images = np.random.default_rng(0).normal(size=(16, 8, 8, 1)).astype("float32")
    >>> labels = np.arange(16) % 2
    >>> model = keras.Sequential([keras.Input((8, 8, 1)), keras.layers.Flatten(),
    ...                           keras.layers.Dense(2, activation="softmax")])
    >>> model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    >>> batches = AugmentedImages(images, labels, 8, steps_per_epoch=2, seed=0)
    >>> run = fit_with_test_curve(model, batches, 3, (images[:8], labels[:8]),
    ...                           (images, labels))
    >>> len(run["test_accuracy"]), len(run["train_accuracy"])
    (3, 3)
    """
    start = time.perf_counter()
    build_optimizer(model)
    history = model.fit(
        batches,
        epochs=evaluations,
        validation_data=curve_test,
        validation_batch_size=500,
        verbose=0,
    )
    _, final = model.evaluate(*test, batch_size=500, verbose=0)
    return {
        "final_test_accuracy": float(final),
        "test_accuracy": [float(value) for value in history.history["val_accuracy"]],
        "train_accuracy": [float(value) for value in history.history["accuracy"]],
        "seconds": time.perf_counter() - start,
    }


def top1_accuracy(probabilities: Tensor, labels: Tensor) -> float:
    """The share of examples whose highest-scoring class is their label.

    Args:
        probabilities: `(n, classes)` scores, such as a softmax's output.
        labels: integer labels `(n,)`.

    Returns:
        float in `[0, 1]`.

    Example:

    >>> top1_accuracy(np.array([[0.9, 0.1], [0.3, 0.7], [0.6, 0.4]]), np.array([0, 1, 1]))
    0.6666666666666666
    """
    return float(np.mean(np.argmax(np.asarray(probabilities), -1) == np.asarray(labels)))


def inference_function(model):
    """A function running `model` at inference, compiled once for repeated calls.

    A `tf.function` (retracing only when the shapes change) on TensorFlow;
    `model.predict_on_batch` on the other backends.

    Args:
        model: a `keras.Model`.

    Returns:
        A function from the model's inputs to its outputs.

    Example:

    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2)])
    >>> tuple(inference_function(model)(np.ones((4, 3), "float32")).shape)
    (4, 2)
    """
    if keras.backend.backend() != "tensorflow":
        return model.predict_on_batch
    from keras_attn.kernels import runtime  # the kernels import utils

    return runtime.graph_function(model, reduce_retracing=True)


def ordered_batches(x: Tensor, y: Tensor, batch_size: int) -> dict[str, Any]:
    """`fit` arguments that train on `(x, y)` in order, in batches of `batch_size`.

    On TensorFlow a `tf.data` pipeline with autotuning off: from arrays,
    Keras builds one with autotuning on, and every `fit` call then waits at
    its end for the autotuning thread (about 20 s per call for an epoch of
    MovieLens-100K on 2 cores, as long as the epoch itself). Elsewhere the
    arrays, which Keras batches in order with `shuffle=False`.

    Args:
        x: inputs, an array with one row per sample.
        y: targets, with as many rows.
        batch_size: int, at least 1.

    Returns:
        dict of `fit` keyword arguments.

    Example:

    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile(loss="mse")
    >>> x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    >>> history = model.fit(**ordered_batches(x, y, 4), epochs=1, verbose=0)
    """
    batch_size = check_int("batch_size", batch_size)
    rows_x, rows_y = np.shape(x)[0], np.shape(y)[0]
    if rows_x != rows_y:
        raise ValueError(
            f"`x` and `y` must have one row per sample, as many in each. "
            f"Received: x with {rows_x} rows and y with {rows_y} rows"
        )
    if keras.backend.backend() != "tensorflow":
        return {"x": x, "y": y, "batch_size": batch_size, "shuffle": False}
    from keras_attn.kernels import runtime  # the kernels import utils

    return {"x": runtime.ordered_dataset(x, y, batch_size), "shuffle": False}


def step_losses(model: keras.Model, x: Tensor, y: Tensor, batch_size: int) -> np.ndarray:
    """Trains a compiled `model` one epoch on `(x, y)` in order; the loss after each step.

    The running loss that `fit` reports after each training step (the mean
    over the epoch's steps so far), in the order of `ordered_batches`: two
    models that train the same way give the same array. A model compiled
    with `steps_per_execution > 1` trains this epoch one step per execution
    (`fit` reports the loss only once per execution; the steps are the
    same) and gets its setting back after it; its compiled training
    function is rebuilt at its next `fit`.

    Args:
        model: a compiled `keras.Model`.
        x: inputs, an array with one row per sample.
        y: targets, with as many rows.
        batch_size: int, at least 1.

    Returns:
        `(steps,)` float numpy array.

    Example:

    >>> model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
    >>> model.compile(optimizer="sgd", loss="mse")
    >>> x, y = np.ones((8, 3), "float32"), np.zeros((8, 1), "float32")
    >>> step_losses(model, x, y, 4).shape
    (2,)
    """
    losses = []
    record = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"]))
    )
    steps_per_execution = model.steps_per_execution
    model.steps_per_execution, model.train_function = 1, None
    try:
        model.fit(**ordered_batches(x, y, batch_size), epochs=1, callbacks=[record], verbose=0)
    finally:
        model.steps_per_execution, model.train_function = steps_per_execution, None
    return np.array(losses)
