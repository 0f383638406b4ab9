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
