"""A softmax linear probe on frozen features."""

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.utils.training import build_optimizer


def fit_linear_probe(
    features: Tensor,
    labels: Tensor,
    num_classes: int,
    steps: int = 300,
    learning_rate: float = 0.01,
) -> list[np.ndarray]:
    """Fits a linear softmax classifier on frozen features by full-batch Adam.

    Each step is one Adam update on the cross-entropy of all the examples, so
    `steps` updates are what `fit(..., epochs=steps, batch_size=len(labels))`
    gives, without the cost of an epoch loop per update.

    Args:
        features: `(examples, dim)` float array, for example sentence
            embeddings of a frozen encoder.
        labels: `(examples,)` integer array of classes in `[0, num_classes)`.
        num_classes: int >= 2, number of classes.
        steps: int >= 1, full-batch Adam updates.
        learning_rate: float > 0, Adam learning rate.

    Returns:
        `[kernel, bias]` NumPy arrays of shapes `(dim, num_classes)` and
        `(num_classes,)`, for `set_weights` on a `Dense(num_classes)` layer
        (its softmax, if any, gives the probe's probabilities).

    Example:

    >>> features = np.array([[0.0, 1.0], [1.0, 0.0], [0.1, 0.9], [0.9, 0.1]], "float32")
    >>> kernel, bias = fit_linear_probe(features, np.array([0, 1, 0, 1]), 2, steps=50)
    >>> np.argmax(features @ kernel + bias, -1).tolist()
    [0, 1, 0, 1]
    """
    features = np.asarray(features, "float32")
    labels = np.asarray(labels)
    if features.ndim != 2 or len(features) == 0:
        raise ValueError(
            "`features` must be a non-empty (examples, dim) array. "
            f"Received: features with shape {features.shape}"
        )
    if labels.shape != (len(features),):
        raise ValueError(
            f"`labels` must have shape ({len(features)},), one per example. "
            f"Received: labels with shape {labels.shape}"
        )
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 2:
        raise ValueError(
            f"`num_classes` must be an integer >= 2. Received: num_classes={num_classes!r}"
        )
    if labels.min() < 0 or labels.max() >= num_classes:
        raise ValueError(
            f"`labels` must lie in [0, {num_classes}). "
            f"Received: labels from {labels.min()} to {labels.max()}"
        )
    if isinstance(steps, bool) or not isinstance(steps, int) or steps < 1:
        raise ValueError(f"`steps` must be an integer >= 1. Received: steps={steps!r}")
    if not learning_rate > 0:
        raise ValueError(f"`learning_rate` must be > 0. Received: learning_rate={learning_rate!r}")
    probe = keras.Sequential([keras.Input((features.shape[-1],)), keras.layers.Dense(num_classes)])
    probe.compile(
        keras.optimizers.Adam(learning_rate),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
    )
    build_optimizer(probe)
    for _ in range(steps):
        probe.train_on_batch(features, labels)
    return [keras.ops.convert_to_numpy(weight) for weight in probe.layers[-1].weights]
