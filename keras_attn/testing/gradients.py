"""Outputs and gradients of a layer call on any backend, for tests."""

import keras
import numpy as np

from keras_attn.kernels import runtime


def output_and_gradients(layer, x, seed=1, **call_kwargs):
    """The output of `layer(x, **call_kwargs)` and the gradients of a fixed projection of it.

    The loss is `sum(output * r)` with `r` drawn from `seed`, so every output
    entry has its own weight in the gradient.

    Args:
        layer: a built Keras layer.
        x: numpy input.
        seed: int, seed of the cotangent `r`.
        **call_kwargs: further call arguments (numpy arrays or Python values).

    Returns:
        `(output, gradients)`, numpy arrays; `gradients` lists the gradient
        with respect to `x`, then to each trainable variable.
    """
    call_kwargs = {
        k: keras.ops.convert_to_tensor(v) if isinstance(v, np.ndarray) else v
        for k, v in call_kwargs.items()
    }
    trainable = [v.value for v in layer.trainable_variables]
    frozen = [v.value for v in layer.non_trainable_variables]

    def call(x, *weights):
        return layer.stateless_call(list(weights), frozen, x, **call_kwargs)[0]

    return function_output_and_gradients(call, [x, *trainable], seed=seed, dtype=None)


def function_output_and_gradients(function, inputs, seed=1, dtype="float32"):
    """The output of `function(*inputs)` and the gradients of a fixed projection of it.

    As `output_and_gradients`, for a function of tensors, such as an
    attention kernel: the loss is `sum(output * r)` with `r` drawn from
    `seed`, and the gradients are those in each of `inputs`.

    Args:
        function: callable taking the tensors `inputs` and returning one tensor.
        inputs: numpy arrays.
        seed: int, seed of the cotangent `r`.
        dtype: the dtype the inputs are cast to before the call, or `None`
            (as they are).

    Returns:
        `(output, gradients)`, numpy arrays in float32, one gradient per input.
    """
    if dtype is not None:
        inputs = [keras.ops.cast(x, dtype) for x in inputs]
    output_shape = tuple(function(*inputs).shape)
    cotangent = np.random.default_rng(seed).normal(size=output_shape).astype("float32")
    cotangent = keras.ops.convert_to_tensor(cotangent)

    def loss(*tensors):
        output = function(*tensors)
        return keras.ops.sum(keras.ops.cast(output, "float32") * cotangent), output

    grads, output = runtime.gradients(loss, inputs)
    as_float32 = [keras.ops.cast(g, "float32") for g in grads]
    return _numpy(keras.ops.cast(output, "float32")), [_numpy(g) for g in as_float32]


def _numpy(tensor):
    return keras.ops.convert_to_numpy(tensor)
