"""The exact GELU of the blocks and models of keras_attn, in ops that every exporter writes."""

import math

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_attn")
def gelu(x):
    """The exact GELU, `x Φ(x)`, as `keras.activations.gelu(x, approximate=False)`.

    On TensorFlow it is written as `x (1 + erf(x / √2)) / 2` (see
    `erf_gelu`): TensorFlow's own exact GELU writes `erfc`, which tf2onnx
    exports as an `Erfc` node that ONNX has no op for, where `Erf` is one.
    On JAX and torch it is the backend's own exact GELU.

    Args:
        x: float tensor.

    Returns:
        The GELU of `x`, of its shape and dtype.

    Example:

    >>> x = np.array([-1.0, 0.0, 2.0], "float32")
    >>> keras.ops.convert_to_numpy(gelu(x)).round(4).tolist()
    [-0.1587, 0.0, 1.9545]
    """
    if keras.backend.backend() == "tensorflow":
        return erf_gelu(x)
    return ops.gelu(x, approximate=False)


def erf_gelu(x):
    """The exact GELU as `x (1 + erf(x / √2)) / 2`, JAX's formula.

    As many elementwise ops as TensorFlow's `erfc` form, so it trains as
    fast; in float32 it equals the exact GELU to 1e-6 absolute or relative
    (the error of `erf` near ±1, about two units in the last place of the
    result around |x| = 5).

    Args:
        x: float tensor.

    Returns:
        The GELU of `x`, of its shape and dtype.
    """
    x = ops.convert_to_tensor(x)
    return 0.5 * x * (1.0 + ops.erf(x * (1.0 / math.sqrt(2.0))))


def exportable_activation(activation):
    """`activation`, or `gelu` in place of Keras' exact GELU (`"gelu"`)."""
    return gelu if activation is keras.activations.gelu else activation
