"""Type aliases of the public API's annotations.

Keras tensors have no common type across backends, so a tensor argument is
annotated `Tensor`: an alias of `Any` that names what is meant.

The module imports no Keras (Keras' initializer class is named by a forward
reference), so that `keras_attn.utils`, which uses these aliases, imports
without Keras for the command line.
"""

from typing import TYPE_CHECKING, Any, TypeAlias, Union

if TYPE_CHECKING:
    import keras

Tensor: TypeAlias = Any
"""A TensorFlow, JAX or torch tensor, a NumPy array, or a `keras.KerasTensor`."""

Shape: TypeAlias = tuple[int | None, ...]
"""A shape whose unknown sizes are `None`, as Keras gives it to `build`."""

Initializer: TypeAlias = Union[str, "keras.initializers.Initializer", dict]  # noqa: UP007
"""What Keras accepts for an initializer: a name, an instance, or a config."""
