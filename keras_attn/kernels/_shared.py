"""What the kernels share: the masked softmax, loop helpers and the choice of implementation."""

import importlib

import keras
from keras import ops

from keras_attn.utils.validation import check_choice

IMPLEMENTATIONS = ("auto", "reference", "native")
# Finite stand-in for -inf: a fully masked row must give zeros, not NaN.
MASKED_LOGIT = -1e9
# The module of each backend's native implementations and operations, imported on that
# backend only (see `backend_module`).
NATIVE_MODULES = {
    "torch": "keras_attn.kernels._torch",
    "jax": "keras_attn.kernels._jax",
    "tensorflow": "keras_attn.kernels._tensorflow",
}


def native_kernel(kernel, implementation, blocked_by=None):
    """The native implementation of `kernel` to run, or `None` to run the reference.

    `implementation` is `"auto"` (the native one where the backend has one
    that can run now), `"reference"` or `"native"`, which raises a
    `ValueError` where none can run. `blocked_by`, the name of an argument
    that rules the native implementation out for this call, or `None`.
    """
    check_choice("implementation", implementation, IMPLEMENTATIONS)
    if implementation == "reference":
        return None
    found = None if blocked_by is not None else _runnable(kernel)
    if found is None and implementation == "native":
        reason = (
            f"not with `{blocked_by}`"
            if blocked_by is not None
            else f"not on the {keras.backend.backend()} backend here"
        )
        raise ValueError(
            f"`{kernel}` has no native implementation that can run ({reason}); use "
            f"implementation='auto' or 'reference'. Received: implementation={implementation!r}"
        )
    return found


def backend_module():
    """The module of the current backend's implementations, or `None` (a backend with none)."""
    name = NATIVE_MODULES.get(keras.backend.backend())
    return None if name is None else importlib.import_module(name)


def _runnable(kernel):
    """The current backend's native `kernel`, or `None` (none, or a model being traced)."""
    module = backend_module()
    if module is None or module.tracing():
        return None
    return module.NATIVE.get(kernel)


def masked_softmax(logits, allowed, logit_scale=None, additive_mask=None, dtype="float32"):
    """Softmax weights over the last axis of the allowed entries, computed in float32.

    `allowed`, boolean and broadcastable to `logits`, or `None` (every entry).
    `logit_scale` multiplies the float32 logits. Without `additive_mask`, a
    row with no allowed entry gets zero weights; with it, `additive_mask` is
    added to the logits of the other entries instead. Returned in `dtype`.
    """
    logits = ops.cast(logits, "float32")
    if logit_scale is not None:
        logits = logits * ops.cast(logit_scale, "float32")
    if allowed is None:
        return ops.cast(ops.softmax(logits, axis=-1), dtype)
    if additive_mask is not None:
        weights = ops.softmax(logits + ops.where(allowed, 0.0, additive_mask), axis=-1)
        return ops.cast(weights, dtype)
    weights = ops.softmax(ops.where(allowed, logits, MASKED_LOGIT), axis=-1)
    # A row with no allowed entry gets zero weights instead of a uniform leak.
    weights = ops.where(ops.any(allowed, axis=-1, keepdims=True), weights, 0.0)
    return ops.cast(weights, dtype)


def padded(x, before, after):
    """`x` with `before` and `after` zero steps around axis 1."""
    parts = [x]
    if before:
        parts.insert(0, ops.zeros((ops.shape(x)[0], before, *x.shape[2:]), x.dtype))
    if after:
        parts.append(ops.zeros((ops.shape(x)[0], after, *x.shape[2:]), x.dtype))
    return ops.concatenate(parts, axis=1) if len(parts) > 1 else x


def window(padded, start, length, axis=1):
    """`padded[:, start : start + length]` along `axis` (1 or more), `start` an int or a tensor.

    `start` is a Python int in a loop on torch (a view, without op
    dispatch) and a tensor in a compiled loop.
    """
    if isinstance(start, int):
        return padded[(slice(None),) * axis + (slice(start, start + length),)]
    starts = [0] * len(padded.shape)
    starts[axis] = start
    sizes = [ops.shape(padded)[0], *padded.shape[1:]]
    sizes[axis] = length
    return ops.slice(padded, starts, sizes)


def loop(count, step, initial, held, first=0):
    """`ops.fori_loop(first, first + count, ...)` of `step(n, state, held)`, `held` unchanged.

    The loop's step reads the arrays `held` from the carry, never from a
    closure: jax2onnx (ONNX export from JAX) lowers the arrays a loop body
    closes over as constants, which the model's traced inputs cannot be.
    Under XLA the unchanged carry is the same buffer at every step.
    """

    def body(n, carry):
        state, arrays = carry
        return step(n, state, arrays), arrays

    return ops.fori_loop(first, first + count, body, (initial, held))[0]


def causal_mask(queries, length):
    """Boolean `(queries, length)`: the last `queries` positions see the keys up to theirs."""
    # Boolean masks gain axes with `expand_dims`: indexing with `None` becomes
    # a strided slice that the TFLite converter keeps as a TensorFlow op.
    rows = ops.expand_dims(ops.arange(length - queries, length), 1)  # (queries, 1)
    return rows >= ops.expand_dims(ops.arange(0, length), 0)
