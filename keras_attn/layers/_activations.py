"""The exact GELU of the blocks and models of keras_attn, in ops that every exporter writes."""

import math

import keras
from keras import ops

# Numerical Recipes' `erfcc` (Press et al., 2nd ed., section 6.2): for z >= 0,
# erfc(z) = t exp(-z^2 + P(t)) with t = 1 / (1 + z / 2), P's coefficients
# from the constant term up; relative error below 1.2e-7 for every z >= 0.
_ERFC_COEFFICIENTS = (
    -1.26551223,
    1.00002368,
    0.37409196,
    0.09678418,
    -0.18628806,
    0.27886807,
    -1.13520398,
    1.48851587,
    -0.82215223,
    0.17087277,
)


@keras.saving.register_keras_serializable(package="keras_attn")
def gelu(x):
    """The exact GELU, `x Φ(x)`, as `keras.activations.gelu(x, approximate=False)`.

    On TensorFlow it is written with `exp` and arithmetic only (see
    `tail_gelu`): TensorFlow's own exact GELU writes `erfc`, which tf2onnx
    exports as an `Erfc` node that ONNX has no op for. On JAX and torch it
    is the backend's own exact GELU.

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
        return tail_gelu(x)
    return ops.gelu(x, approximate=False)


def tail_gelu(x):
    """The exact GELU as `relu(x) - |x| Φ(-|x|)`, the normal tail `Φ(-|x|)` by a rational fit.

    `Φ(-|x|) = erfc(|x| / √2) / 2`, with `erfc` by Numerical Recipes'
    approximation (relative error below 1.2e-7), computed in float32 at
    least. Only the small tail term is approximated, so the result equals
    the exact GELU to 1e-6 in float32 over every input (`erf` near ±1
    loses that accuracy for `|x|` above 4). `x` of any size gives a finite
    result, infinite `x` none.

    Args:
        x: float tensor.

    Returns:
        The GELU of `x`, of its shape and dtype.
    """
    x = ops.convert_to_tensor(x)
    wide = ops.cast(x, keras.backend.result_type(x.dtype, "float32"))
    size = ops.abs(wide) / math.sqrt(2.0)  # |x| / √2
    t = 1.0 / (1.0 + 0.5 * size)
    polynomial = _ERFC_COEFFICIENTS[-1]
    for coefficient in reversed(_ERFC_COEFFICIENTS[:-1]):  # Horner's scheme
        polynomial = polynomial * t + coefficient
    tail = 0.5 * t * ops.exp(polynomial - ops.square(size))  # Φ(-|x|)
    return ops.cast(ops.relu(wide) - ops.abs(wide) * tail, x.dtype)


def exportable_activation(activation):
    """`activation`, or `gelu` in place of Keras' exact GELU (`"gelu"`)."""
    return gelu if activation is keras.activations.gelu else activation
