"""Measured throughput of (pruned) models."""

import functools
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import keras

from keras_attn._typing import Tensor
from keras_attn.kernels import runtime
from keras_attn.pruning.prune_heads import prune_heads
from keras_attn.pruning.select_heads import select_heads
from keras_attn.utils.timing import median_seconds


def pruned_models(
    model: keras.Model,
    scores: Mapping[str, Tensor],
    fractions: Iterable[float],
    min_heads_per_layer: int = 1,
) -> dict[float, keras.Model]:
    """Copies of `model` with each fraction of its lowest-scored heads really removed.

    Args:
        model: a functional Keras model (see `prune_heads`).
        scores: dict `layer name -> (num_heads,) array`.
        fractions: iterable of floats in [0, 1); 0 gives `model` itself.
        min_heads_per_layer: int, heads each layer keeps.

    Returns:
        dict `fraction -> model`, in the order of `fractions`.
    """
    total = sum(len(score) for score in scores.values())
    models = {}
    for fraction in fractions:
        removed = select_heads(scores, round(fraction * total), min_heads_per_layer)
        models[fraction] = prune_heads(model, removed) if removed else model
    return models


def measure_throughput(models: Sequence[keras.Model], inputs: Any, repeats: int) -> list[float]:
    """Median examples per second of each model on the same `inputs`.

    Each model runs as a graph (`tf.function` on TensorFlow; a plain call
    on other backends) and is traced once before timing; the models then
    take turns in every round (`keras_attn.utils.median_seconds`), so that a
    change of the machine's load affects all of them alike.

    Args:
        models: list of Keras models that accept `inputs`.
        inputs: a batch, any structure of arrays; its examples are counted
            along the first axis of its first array.
        repeats: int >= 1, timed rounds.

    Returns:
        list of floats, examples per second, in the order of `models`.

    Example:

    >>> x = keras.Input((4, 8))
    >>> model = keras.Model(x, MultiHeadSelfAttention(2, 4)(x))
    >>> speeds = measure_throughput([model], np.zeros((3, 4, 8), "float32"), repeats=2)
    >>> len(speeds), speeds[0] > 0
    (1, True)
    """
    batch = len(keras.tree.flatten(inputs)[0])
    calls = [_graph_call(model, inputs) for model in models]
    seconds = median_seconds(calls, repeats)
    return [batch / value for value in seconds]


def _graph_call(model, inputs):
    """A call of `model` on `inputs` at inference: through a `tf.function` on TensorFlow."""
    function = runtime.graph_function(
        functools.partial(model, training=False), reduce_retracing=True
    )
    return lambda: function(inputs)
