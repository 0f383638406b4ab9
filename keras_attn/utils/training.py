"""Training with a test-accuracy curve, as the vision reproductions report it."""

import time


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
