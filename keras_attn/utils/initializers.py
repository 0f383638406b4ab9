"""Copies of Keras initializers, one per sublayer."""

import keras


def clone_initializer(
    initializer: keras.initializers.Initializer,
) -> keras.initializers.Initializer:
    """A new initializer of the same class and config as `initializer`.

    A seeded initializer draws the same values at every call, so each
    sublayer gets its own copy (as KerasHub's `clone_initializer` does)
    rather than sharing one object; unseeded copies still draw different
    values.

    Args:
        initializer: a `keras.initializers.Initializer` instance.

    Returns:
        A fresh initializer with the same config.

    Example:

    >>> import keras
    >>> original = keras.initializers.GlorotUniform(seed=1)
    >>> copy = clone_initializer(original)
    >>> copy is original, copy.get_config() == original.get_config()
    (False, True)
    """
    return initializer.__class__.from_config(initializer.get_config())
