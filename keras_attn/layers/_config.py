"""The `get_config` entries that the layers of keras_attn write alike."""

import inspect
from collections.abc import Iterable
from typing import Any

import keras


def argument_config(layer: keras.layers.Layer, names: Iterable[str]) -> dict[str, Any]:
    """The config entries of constructor arguments that a layer keeps as attributes.

    Each name maps to the attribute of that name, serialized: ints, floats,
    strings, `None` and tuples of them stay as they are; initializers and
    regularizers are serialized as `keras.initializers.serialize` and
    `keras.regularizers.serialize` do, a function (an activation) as
    `keras.activations.serialize` does, and a dict value by value.

    Args:
        layer: the layer whose `get_config` is written.
        names: the argument names, each also the name of an attribute.

    Returns:
        A dict from each name to its serialized value, in the order of `names`.

    Example:

    >>> layer = keras.layers.Dense(4, kernel_initializer="ones")
    >>> config = argument_config(layer, ("units", "kernel_initializer"))
    >>> config["units"], config["kernel_initializer"]["class_name"]
    (4, 'Ones')
    """
    return {name: _serialized(getattr(layer, name)) for name in names}


def _serialized(value):
    if inspect.isfunction(value):
        return keras.activations.serialize(value)
    return keras.saving.serialize_keras_object(value)
