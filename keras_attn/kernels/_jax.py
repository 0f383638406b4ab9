"""The JAX implementations of the attention kernels and of `runtime`.

Imported on the JAX backend only (see `_shared.native_kernel`), so that an
install without JAX imports the library.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np

from keras_attn.kernels._shared import MASKED_LOGIT, loop


def tracing():
    """Never: `jax.nn.dot_product_attention` traces under `jit` and every exporter."""
    return False


def dense_attention(query, key, value, mask, *, scale, causal):
    """`jax.nn.dot_product_attention`: cuDNN's fused kernel on a GPU where it applies, else XLA.

    A row with no visible key gets finite weights (JAX masks with a large
    negative number); the caller sets its output to zero.
    """
    mask = None if mask is None else jnp.asarray(mask, bool)  # (batch, 1, queries or 1, length)
    arguments = {"mask": mask, "scale": scale, "is_causal": causal}
    if jax.devices()[0].platform == "gpu":
        try:  # cuDNN takes some dtypes, head sizes and masks only; it says so when traced
            return jax.nn.dot_product_attention(
                query, key, value, implementation="cudnn", **arguments
            )
        except (ValueError, NotImplementedError, RuntimeError):
            pass
    return jax.nn.dot_product_attention(
        query, key, value, implementation="xla", **arguments
    )  # (batch, queries, heads, value_dim)


def offset_attention(query, key, value, offsets, mask, *, logit_scale, dropout):
    """`offset_attention` of scaled queries, with slot-major logits and weights.

    The reference's loops over the offsets, with the logits, weights and
    their gradients `(K, batch, length, heads)`: each offset's step writes
    its slot in place (the reference, which every exporter takes, selects
    it into the whole `K`-wide array at every step) and reads one
    contiguous slot of the weights, and the softmax runs over the leading
    axis with a custom gradient whose sums over the slots are products with
    ones (see `_slot_sum`). Queries, keys and values stay `(batch, length,
    heads, dim)`, where a shift along the length is a contiguous block of
    rows.

    Returns:
        `(context, weights)`, the weights `(batch, heads, length, K)`.
    """
    offsets = tuple(offsets)
    length = query.shape[1]
    logits = _OffsetSums(offsets, length).logits(query, key)  # (K, batch, length, heads)
    logits = logits.astype(jnp.float32)
    if logit_scale is not None:
        logits = logits * jnp.reshape(logit_scale.astype(jnp.float32), (1, -1, 1, 1))
    allowed = _allowed_slots(mask, offsets, length)  # (K, batch or 1, length, 1)
    weights = _softmax_over_slots(jnp.where(allowed, logits, MASKED_LOGIT), allowed)
    weights = weights.astype(value.dtype)
    if dropout is not None:  # on the weights as the reference lays them out
        weights = jnp.transpose(dropout(jnp.transpose(weights, (1, 3, 2, 0))), (3, 0, 2, 1))
    context = _OffsetSums(offsets, length).context(weights, value)
    return context, jnp.transpose(weights, (1, 3, 2, 0))


def _allowed_slots(mask, offsets, length):
    """Boolean `(K, batch or 1, length, 1)`: the slots of `mask` that reach a position."""
    reach = np.arange(length)[None, :] >= np.array(offsets)[:, None]  # (K, length)
    reach = reach[:, None, :, None]  # (K, 1, length, 1)
    if mask is None:
        return reach
    mask = jnp.broadcast_to(jnp.asarray(mask, bool), (mask.shape[0], 1, length, len(offsets)))
    return jnp.logical_and(jnp.transpose(mask, (3, 0, 2, 1)), reach)


def _softmax_over_slots(logits, allowed):
    """The softmax over axis 0 (the slots), zero where a query has no allowed slot.

    `logits` `(K, batch, length, heads)` hold `MASKED_LOGIT` where `allowed`
    `(K, batch or 1, length, 1)` is false.
    """
    seen = functools.reduce(jnp.logical_or, list(allowed))  # (batch or 1, length, 1)
    return jnp.where(seen, _slot_softmax(logits), 0.0)


def _slot_sum(x):
    """The sum over axis 0, as a product with ones.

    XLA on the CPU computes a product once; a sum of the slots' slices it
    fuses into every consumer, which repeats it for each slot, and its
    reduction over the slots runs in a YNNPACK fusion that was slower here,
    as was the autodiff of a softmax written with slices (a padded array
    per slot).
    """
    return jnp.tensordot(jnp.ones((x.shape[0],), x.dtype), x, axes=1)


@jax.custom_vjp
def _slot_softmax(logits):
    peak = jnp.max(logits, axis=0)  # (batch, length, heads)
    exps = jnp.exp(logits - peak)
    return exps / _slot_sum(exps)


def _slot_softmax_forward(logits):
    weights = _slot_softmax(logits)
    return weights, weights


def _slot_softmax_backward(weights, grad):
    return (weights * (grad - _slot_sum(weights * grad)),)


_slot_softmax.defvjp(_slot_softmax_forward, _slot_softmax_backward)


class _OffsetSums:
    """The offset sums of `offset_attention` as loops, slot-major, with custom gradients."""

    def __init__(self, offsets, length):
        self.offsets, self.length = offsets, length
        self.reach = min(max(offsets), length)  # the furthest shift that reaches a key

    def shift(self, n):
        return jnp.minimum(jnp.asarray(self.offsets, jnp.int32)[n], self.reach)

    def rows(self, padded, start):
        """`padded[:, start : start + length]`."""
        return jax.lax.dynamic_slice_in_dim(padded, start, self.length, axis=1)

    def padded(self, x, before, after):
        return jnp.pad(x, [(0, 0), (before, after), (0, 0), (0, 0)])

    # The loops read their arrays from the carry (`loop`): jax2onnx lowers the
    # arrays a loop body closes over as constants, which an export's are not.

    def dots(self, a, b):
        """`a[:, i] . b[:, i - offset_j]` per head, `(K, batch, length, heads)`."""

        def step(n, dots, held):
            a, padded_b = held
            view = self.rows(padded_b, self.reach - self.shift(n))  # b[:, i - offset]
            summed = jnp.ones((a.shape[-1], 1), a.dtype)  # the sum over `dim`, a product
            column = jnp.matmul(a * view, summed)[..., 0]  # (batch, length, heads)
            return jax.lax.dynamic_update_index_in_dim(dots, column, n, 0)

        # Zeros made from `a`, not from its shape, whose batch an export leaves unknown.
        initial = jnp.zeros_like(a[..., 0])[None] + jnp.zeros((len(self.offsets), 1, 1, 1), a.dtype)
        return loop(len(self.offsets), step, initial, (a, self.padded(b, self.reach, 0)))

    def mix(self, weights, b):
        """`sum_j weights[j, :, i, :, None] * b[:, i - offset_j]`, `(batch, length, heads, dim)`."""

        def step(n, total, held):
            weights, padded_b = held
            view = self.rows(padded_b, self.reach - self.shift(n))
            return total + weights[n][..., None] * view

        held = (weights, self.padded(b, self.reach, 0))
        return loop(len(self.offsets), step, jnp.zeros_like(b), held)

    def scatter(self, weights, a):
        """The transpose of `mix` in `b`: `sum_j (weights_j * a)[:, i + offset_j]`."""

        def step(n, total, held):
            padded_weights, padded_a = held
            shift = self.shift(n)
            column = jax.lax.dynamic_index_in_dim(padded_weights, n, 0, keepdims=False)
            return total + self.rows(column, shift)[..., None] * self.rows(padded_a, shift)

        padded_weights = jnp.pad(weights, [(0, 0), (0, 0), (0, self.reach), (0, 0)])
        held = (padded_weights, self.padded(a, 0, self.reach))
        return loop(len(self.offsets), step, jnp.zeros_like(a), held)

    def logits(self, query, key):
        """`dots(query, key)`; its gradients are a `mix` and a `scatter` of the same form."""
        return _with_gradient(
            self.dots, lambda query, key, grad: (self.mix(grad, key), self.scatter(grad, query))
        )(query, key)

    def context(self, weights, value):
        """`mix(weights, value)`; its gradients are `dots` and a `scatter` of the same form."""
        return _with_gradient(
            self.mix,
            lambda weights, value, grad: (self.dots(grad, value), self.scatter(weights, grad)),
        )(weights, value)


def _with_gradient(compute, gradients):
    """`compute(x, y)` whose gradients in `x` and `y` are `gradients(x, y, grad)`."""

    @jax.custom_vjp
    def function(x, y):
        return compute(x, y)

    def forward(x, y):
        return compute(x, y), (x, y)

    def backward(saved, grad):
        return gradients(*saved, grad)

    function.defvjp(forward, backward)
    return function


NATIVE = {"dense_attention": dense_attention, "offset_attention": offset_attention}


def gradients(loss, inputs):
    """`runtime.gradients` with `jax.grad`."""
    grads, aux = jax.grad(loss, argnums=tuple(range(len(inputs))), has_aux=True)(*inputs)
    return list(grads), aux


def xla_compiled(function):
    """`runtime.xla_compiled`: `jax.jit`."""
    return jax.jit(function)


def compiled_gradient(loss, *arguments):
    """`runtime.compiled_gradient`: `jax.grad(loss)` lowered and compiled by XLA."""
    return jax.jit(jax.grad(loss)).lower(*arguments).compile()
