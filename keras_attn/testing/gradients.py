"""Outputs and gradients of a layer call on any backend, for tests."""

import keras
import numpy as np


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
    output_shape = keras.ops.convert_to_numpy(layer(x, **call_kwargs)).shape
    cotangent = np.random.default_rng(seed).normal(size=output_shape).astype("float32")
    backend = keras.backend.backend()
    if backend == "tensorflow":
        output, grads = _tensorflow(layer, x, cotangent, call_kwargs)
    elif backend == "jax":
        output, grads = _jax(layer, x, cotangent, call_kwargs)
    else:
        output, grads = _torch(layer, x, cotangent, call_kwargs)
    return keras.ops.convert_to_numpy(output), [keras.ops.convert_to_numpy(g) for g in grads]


def _tensorflow(layer, x, cotangent, call_kwargs):
    import tensorflow as tf

    x = tf.constant(x)
    with tf.GradientTape() as tape:
        tape.watch(x)
        output = layer(x, **call_kwargs)
        loss = tf.reduce_sum(tf.cast(output, "float32") * cotangent)
    return output, tape.gradient(loss, [x, *layer.trainable_variables])


def _jax(layer, x, cotangent, call_kwargs):
    import jax

    def loss(weights, x):
        output = layer.stateless_call(weights, [], x, **call_kwargs)[0]
        return (output.astype("float32") * cotangent).sum(), output

    weights = [v.value for v in layer.trainable_variables]
    (weight_grads, x_grad), output = jax.grad(loss, argnums=(0, 1), has_aux=True)(weights, x)
    return output, [x_grad, *weight_grads]


def _torch(layer, x, cotangent, call_kwargs):
    import torch

    x = torch.tensor(x, requires_grad=True)
    kwargs = {
        k: torch.tensor(v) if isinstance(v, np.ndarray) else v for k, v in call_kwargs.items()
    }
    output = layer(x, **kwargs)
    loss = (output.float() * torch.tensor(cotangent)).sum()
    grads = torch.autograd.grad(loss, [x, *[v.value for v in layer.trainable_variables]])
    return output.detach(), grads


def function_output_and_gradients(function, inputs, seed=1, dtype="float32"):
    """The output of `function(*inputs)` and the gradients of a fixed projection of it.

    As `output_and_gradients`, for a function of tensors, such as an
    attention kernel: the loss is `sum(output * r)` with `r` drawn from
    `seed`, and the gradients are those in each of `inputs`.

    Args:
        function: callable taking the tensors `inputs` and returning one tensor.
        inputs: numpy arrays.
        seed: int, seed of the cotangent `r`.
        dtype: the dtype the inputs are cast to before the call.

    Returns:
        `(output, gradients)`, numpy arrays in float32, one gradient per input.
    """
    inputs = [keras.ops.cast(x, dtype) for x in inputs]
    output_shape = tuple(function(*inputs).shape)
    cotangent = np.random.default_rng(seed).normal(size=output_shape).astype("float32")
    cotangent = keras.ops.convert_to_tensor(cotangent)
    backend = keras.backend.backend()

    def loss(*tensors):
        output = function(*tensors)
        return keras.ops.sum(keras.ops.cast(output, "float32") * cotangent), output

    if backend == "tensorflow":
        import tensorflow as tf

        tensors = list(inputs)
        with tf.GradientTape() as tape:
            tape.watch(tensors)
            total, output = loss(*tensors)
        grads = tape.gradient(total, tensors)
    elif backend == "jax":
        import jax

        argnums = tuple(range(len(inputs)))
        grads, output = jax.grad(loss, argnums=argnums, has_aux=True)(*inputs)
    else:
        import torch

        tensors = [x.detach().requires_grad_() for x in inputs]
        total, output = loss(*tensors)
        grads = torch.autograd.grad(total, tensors)
    as_float32 = [keras.ops.cast(g, "float32") for g in grads]
    return _numpy(keras.ops.cast(output, "float32")), [_numpy(g) for g in as_float32]


def _numpy(tensor):
    return keras.ops.convert_to_numpy(tensor)
