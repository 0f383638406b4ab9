"""The torch implementations of the attention kernels and of `runtime`.

Imported on the torch backend only (see `_shared.native_kernel`), so that an
install without torch imports the library. Each equals its `keras.ops`
reference to float rounding, outputs and gradients (tests/kernels).
"""

import torch

from keras_attn.kernels._shared import MASKED_LOGIT

# The bytes of the rows of a block of an offset sum per thread (see `_row_blocks`).
BLOCK_BYTES = 1 << 19


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
    no visible key sees every key here, so that no kernel (some give such a
    row NaN) puts NaN in either pass; the caller sets its output to zero.
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
    """`offset_attention` of scaled queries, position-major and slot-major.

    Queries, keys and values are read `(length, batch, heads, dim)` (a view
    for one example), so that each offset's shifted rows are one contiguous
    block; the logits, weights and their gradients are `(K, length, batch,
    heads)` and contiguous, so that each offset's step reads one slot's
    weights in a row, and the softmax runs over the outer axis: torch's CPU
    softmax over a last axis shorter than 16 (the `K` slots) is far slower
    than over a leading one. The logits of the slots that reach before
    position 0 are `MASKED_LOGIT` from the start (the log-length scale goes
    into the queries, as in the fused dense kernels), so that without a
    `mask` no select runs when every query has a slot at offset 0.

    Returns:
        `(context, weights)`, the weights a `(batch, heads, length, K)` view.
    """
    offsets = tuple(offsets)
    if logit_scale is not None:
        query = query * logit_scale.to(query.dtype)  # (batch or 1, 1, 1, 1)
    query, key, value = (x.transpose(0, 1).contiguous() for x in (query, key, value))
    logits = _OffsetLogits.apply(query, key, offsets).float()  # (K, length, batch, heads)
    allowed = _allowed_slots(mask, offsets, query.shape[0], query.device)
    if allowed is not None:  # (K, length, batch or 1, 1)
        logits = torch.where(allowed, logits, MASKED_LOGIT)
    weights = torch.softmax(logits, dim=0)
    if allowed is not None:  # a query with no allowed slot gets zero weights
        weights = torch.where(allowed.any(dim=0, keepdim=True), weights, 0.0)
    weights = weights.to(value.dtype)
    if dropout is not None:
        weights = dropout(weights.permute(2, 3, 1, 0)).permute(3, 2, 0, 1).contiguous()
    context = _OffsetContext.apply(weights, value, offsets)  # (length, batch, heads, value_dim)
    return context.transpose(0, 1), weights.permute(2, 3, 1, 0)


def _allowed_slots(mask, offsets, length, device):
    """Boolean `(K, length, batch or 1, 1)` of the slots a query may use, or `None` for all.

    `None` without a `mask` when every query has a slot (offset 0): the
    slots reaching before position 0 hold `MASKED_LOGIT` already.
    """
    if mask is None and min(offsets) == 0:
        return None
    positions = torch.arange(length, device=device)[:, None]  # (length, 1)
    reach = positions >= torch.tensor(offsets, device=device)[None, :]  # (length, K)
    allowed = reach if mask is None else mask.to(torch.bool) & reach  # (batch or 1, 1, length, K)
    return allowed.reshape(-1, 1, length, len(offsets)).permute(3, 2, 0, 1)


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
        grad = grad.contiguous()  # (K, length, batch, heads)
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
        grad = grad.contiguous()  # (length, batch, heads, value_dim)
        weights_grad = _dots(grad, value, ctx.offsets) if ctx.needs_input_grad[0] else None
        value_grad = _scatter(weights, grad, ctx.offsets) if ctx.needs_input_grad[1] else None
        return weights_grad, value_grad, None


def _dots(a, b, offsets, fill=0.0):
    """`a[i] . b[i - offsets[j]]`, `(K, length, batch, heads)`, `fill` where `i < offsets[j]`.

    `a` and `b` are position-major, `(length, batch, heads, dim)`. Block by
    block of rows (see `_row_blocks`), each offset's products go to a
    buffer that stays in cache and a matrix-vector product with ones sums
    them: faster than a batch of `(1, dim) x (dim, 1)` products, whose
    cost is per product, and than a sum over the last axis.
    """
    length, batch, heads, dim = a.shape
    dots = a.new_empty((len(offsets), length, batch, heads))
    ones = a.new_ones(dim)
    products = None
    for start, end in _row_blocks(a):
        if products is None:
            products = torch.empty_like(a[start:end])  # (rows, batch, heads, dim)
        for slot, offset in enumerate(offsets):
            first = max(start, offset)  # rows i >= offset read b[i - offset]
            if first < end:
                product = products[: end - first]
                torch.mul(a[first:end], b[first - offset : end - offset], out=product)
                torch.mv(product.view(-1, dim), ones, out=dots[slot, first:end].view(-1))
    for slot, offset in enumerate(offsets):
        dots[slot, :offset] = fill
    return dots


def _mix(weights, b, offsets):
    """`sum_j weights[j, i, ..., None] * b[i - offsets[j]]`, `(length, batch, heads, dim)`."""
    total = torch.empty_like(b)
    for start, end in _row_blocks(b):
        total[start:end].zero_()
        for slot, offset in enumerate(offsets):
            first = max(start, offset)  # rows i >= offset read b[i - offset]
            if first < end:
                column = weights[slot, first:end, :, :, None]  # (rows, batch, heads, 1)
                total[first:end].addcmul_(column, b[first - offset : end - offset])
    return total


def _scatter(weights, a, offsets):
    """The transpose of `_mix` in `b`: `sum_j (weights[j, ..., None] * a)[i + offsets[j]]`."""
    total = torch.empty_like(a)
    for start, end in _row_blocks(a):
        total[start:end].zero_()
        for slot, offset in enumerate(offsets):
            last = min(end, a.shape[0] - offset)  # rows i < length - offset read a[i + offset]
            if start < last:
                column = weights[slot, start + offset : last + offset, :, :, None]
                total[start:last].addcmul_(column, a[start + offset : last + offset])
    return total


def _row_blocks(x):
    """`(start, end)` of the blocks of rows of `x`, `BLOCK_BYTES` for each of torch's threads.

    A sum over the offsets runs block by block, so that each thread's part
    of a block of the sum stays in its core's cache while every offset adds
    to it: about a third faster than whole passes at 8,192 positions and
    more on one thread.
    """
    block_bytes = BLOCK_BYTES * torch.get_num_threads()
    rows = max(1, block_bytes // (x[0].numel() * x.element_size()))
    for start in range(0, x.shape[0], rows):
        yield start, min(start + rows, x.shape[0])


def gradients(loss, inputs):
    """`runtime.gradients` with `torch.autograd.grad`."""
    tensors = [x.detach().requires_grad_() for x in inputs]
    total, aux = loss(*tensors)
    grads = torch.autograd.grad(total, tensors, allow_unused=True, materialize_grads=True)
    return list(grads), aux


def without_gradients(function):
    """`runtime.without_gradients`: `function` under `torch.no_grad`."""
    return torch.no_grad()(function)


def use_one_thread():
    """`runtime.use_one_thread`: one intra-op thread."""
    torch.set_num_threads(1)


def training_devices():
    """`runtime.training_devices`: torch's GPUs, else the CPU."""
    return [f"gpu:{index}" for index in range(torch.cuda.device_count())] or ["cpu:0"]


NATIVE = {"dense_attention": dense_attention, "offset_attention": offset_attention}
