"""The torch implementations of the attention kernels.

Imported on the torch backend only (see `_shared.native_kernel`), so that an
install without torch imports the library. Each equals its `keras.ops`
reference to float rounding, outputs and gradients (tests/kernels).
"""

import torch

from keras_attn.kernels._shared import MASKED_LOGIT


def tracing():
    """Whether torch is tracing or compiling a model (an export, `torch.compile`).

    The references run then: they are made of `keras.ops` calls, which every
    exporter and compiler takes.
    """
    return torch.jit.is_tracing() or torch.compiler.is_compiling()


def dense_attention(query, key, value, mask, *, scale, causal):
    """`scaled_dot_product_attention` on `(batch, length, heads, dim)` tensors.

    The boolean mask goes to the kernel as it is; with `causal`, the causal
    mask is folded into it (the kernel takes one or the other). A row with
    no visible key sees every key here, so that no NaN enters either pass;
    the caller sets its output to zero.
    """
    query, key, value = (x.transpose(1, 2) for x in (query, key, value))  # (b, heads, L, dim)
    if mask is not None:
        mask = mask.to(torch.bool)  # (batch, 1, queries or 1, length)
        if causal:  # as many queries as keys
            ones = torch.ones(query.shape[2], key.shape[2], dtype=torch.bool, device=mask.device)
            mask, causal = mask & ones.tril(), False  # (batch, 1, queries, length)
        mask = mask | ~mask.any(dim=-1, keepdim=True)
    context = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=mask, is_causal=causal, scale=scale
    )  # (batch, heads, queries, value_dim)
    return context.transpose(1, 2)


def offset_attention(query, key, value, offsets, mask, *, logit_scale, dropout):
    """`offset_attention` of scaled queries, slot-major throughout.

    The logits, weights and their gradients are `(K, batch, length, heads)`
    and contiguous, so that each offset's step reads one slot's weights in a
    row, and the softmax runs over the outer axis: torch's softmax over a
    last axis shorter than 16 (the `K` slots) took 25 times as long as over
    the first one at 8,192 positions. The logits of the slots that reach
    before position 0 are `MASKED_LOGIT` from the start (the log-length
    scale goes into the queries, as in the fused dense kernels), so that
    without a `mask` no select runs when every query has a slot at offset 0.

    Returns:
        `(context, weights)`, the weights a `(batch, heads, length, K)` view.
    """
    offsets = tuple(offsets)
    if logit_scale is not None:
        query = query * logit_scale.to(query.dtype)  # (batch or 1, 1, 1, 1)
    logits = _OffsetLogits.apply(query, key, offsets).float()  # (K, batch, length, heads)
    allowed = _allowed_slots(mask, offsets, query.shape[1])  # (K, batch or 1, length, 1)
    if allowed is not None:
        logits = torch.where(allowed, logits, MASKED_LOGIT)
    weights = torch.softmax(logits, dim=0)
    if allowed is not None:  # a query with no allowed slot gets zero weights
        weights = torch.where(allowed.any(dim=0, keepdim=True), weights, 0.0)
    weights = weights.to(value.dtype)
    if dropout is not None:
        weights = dropout(weights.permute(1, 3, 2, 0)).permute(3, 0, 2, 1).contiguous()
    context = _OffsetContext.apply(weights, value, offsets)  # (batch, length, heads, value_dim)
    return context, weights.permute(1, 3, 2, 0)


def _allowed_slots(mask, offsets, length):
    """Boolean `(K, batch or 1, length, 1)` of the slots a query may use, or `None` for all.

    `None` without a `mask` when every query has a slot (offset 0): the
    slots reaching before position 0 hold `MASKED_LOGIT` already.
    """
    if mask is None and min(offsets) == 0:
        return None
    positions = torch.arange(length)[:, None]  # (length, 1)
    reach = positions >= torch.tensor(offsets)[None, :]  # (length, K)
    allowed = reach if mask is None else mask.to(torch.bool) & reach  # (batch or 1, 1, length, K)
    return allowed.reshape(-1, 1, length, len(offsets)).permute(3, 0, 2, 1)


class _OffsetLogits(torch.autograd.Function):
    """Slot-major offset logits; the gradients are offset sums of the same form."""

    @staticmethod
    def forward(ctx, query, key, offsets):
        ctx.offsets = offsets
        ctx.save_for_backward(query, key)
        return _dots(query, key, offsets, fill=MASKED_LOGIT)

    @staticmethod
    def backward(ctx, grad):
        query, key = ctx.saved_tensors
        grad = grad.contiguous()  # (K, batch, length, heads)
        query_grad = _mix(grad, key, ctx.offsets) if ctx.needs_input_grad[0] else None
        key_grad = _scatter(grad, query, ctx.offsets) if ctx.needs_input_grad[1] else None
        return query_grad, key_grad, None


class _OffsetContext(torch.autograd.Function):
    """The context from slot-major weights; the gradients are offset sums of the same form."""

    @staticmethod
    def forward(ctx, weights, value, offsets):
        ctx.offsets = offsets
        ctx.save_for_backward(weights, value)
        return _mix(weights, value, offsets)

    @staticmethod
    def backward(ctx, grad):
        weights, value = ctx.saved_tensors
        grad = grad.contiguous()  # (batch, length, heads, value_dim)
        weights_grad = _dots(grad, value, ctx.offsets) if ctx.needs_input_grad[0] else None
        value_grad = _scatter(weights, grad, ctx.offsets) if ctx.needs_input_grad[1] else None
        return weights_grad, value_grad, None


def _dots(a, b, offsets, fill=0.0):
    """`a[:, i] . b[:, i - offsets[j]]`, `(K, batch, length, heads)`, `fill` where `i < offsets[j]`.

    Each offset's products go to one preallocated buffer, summed over `dim`
    by a product with ones (a matrix-vector product, faster than a sum over
    the last axis).
    """
    batch, length, heads, dim = a.shape
    dots = a.new_full((len(offsets), batch, length, heads), fill)
    products = a.new_empty(a.numel())
    ones = a.new_ones((dim, 1))
    for slot, offset in enumerate(offsets):
        count = length - offset
        if count <= 0:
            continue
        product = products[: batch * count * heads * dim].view(batch, count, heads, dim)
        torch.mul(a[:, offset:], b[:, :count], out=product)  # a[:, i] * b[:, i - offset]
        dots[slot, :, offset:] = torch.matmul(product, ones).squeeze(-1)  # (batch, count, heads)
    return dots


def _mix(weights, b, offsets):
    """`sum_j weights[j, :, i, :, None] * b[:, i - offsets[j]]`, `(batch, length, heads, dim)`."""
    total = torch.zeros_like(b)
    length = b.shape[1]
    for slot, offset in enumerate(offsets):
        if offset < length:
            column = weights[slot, :, offset:, :, None]  # (batch, length - offset, heads, 1)
            total[:, offset:].addcmul_(column, b[:, : length - offset])
    return total


def _scatter(weights, a, offsets):
    """The transpose of `_mix` in `b`: `sum_j (weights[j, ..., None] * a)[:, i + offsets[j]]`."""
    total = torch.zeros_like(a)
    length = a.shape[1]
    for slot, offset in enumerate(offsets):
        if offset < length:
            column = weights[slot, :, offset:, :, None]  # (batch, length - offset, heads, 1)
            total[:, : length - offset].addcmul_(column, a[:, offset:])
    return total


NATIVE = {"dense_attention": dense_attention, "offset_attention": offset_attention}
