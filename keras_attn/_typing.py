"""Type aliases of the public API's annotations.

Keras tensors have no common type across backends, so a tensor argument is
annotated `Tensor`: an alias of `Any` that names what is meant.
"""

from typing import Any, TypeAlias

import keras

Tensor: TypeAlias = Any
"""A TensorFlow, JAX or torch tensor, a NumPy array, or a `keras.KerasTensor`."""

Shape: TypeAlias = tuple[int | None, ...]
"""A shape whose unknown sizes are `None`, as Keras gives it to `build`."""

Initializer: TypeAlias = str | keras.initializers.Initializer | dict
"""What Keras accepts for an initializer: a name, an instance, or a config."""
