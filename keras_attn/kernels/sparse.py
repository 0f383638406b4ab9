"""Sparse attention: each query over a few key slots, at fixed offsets or gathered."""

import numbers
from collections.abc import Callable, Sequence

import keras
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.kernels._shared import loop, masked_softmax, native_kernel, padded, window
from keras_attn.utils.validation import sequence_positions


def offset_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    offsets: Sequence[int],
    mask: Tensor | None = None,
    *,
    scale: float,
    logit_scale: Tensor | None = None,
    dropout: Callable[[Tensor], Tensor] | None = None,
    implementation: str = "auto",
) -> tuple[Tensor, Tensor]:
    """Attention of query `i` over the keys `i - offsets[j]`, from shifted views.

    Slot `j` of query `i` reads key `i - offsets[j]`; a slot reaching
    before position 0 is unused, and so is a slot that `mask` hides. A
    query with no used slot outputs zeros. The softmax runs in float32;
    the weights come in `value`'s dtype.

    The reference implementation (`keras.ops`) computes one logit per
    offset and the context as a running sum over shifted views of the
    values, in loops with a custom gradient of the same form: no key or
    value is copied per slot, and a step keeps `O(length * K)` weights and
    `O(length * heads * head_dim)` activations. The native ones, chosen by
    `implementation="auto"`, keep slot-major logits and weights and run
    the softmax over the slots' axis: on torch (outside a traced or
    compiled model) the same sums as in-place fused multiply-adds
    (`addcmul_`) on contiguous blocks of rows; on JAX the same loops,
    each offset's logits written in place, with a custom gradient of the
    softmax whose sums over the slots are products with ones.

    Args:
        query: `(batch, length, heads, key_dim)`.
        key: `(batch, length, heads, key_dim)`.
        value: `(batch, length, heads, value_dim)`.
        offsets: Python ints `>= 0`, the backward offset of each of the `K`
            slots.
        mask: optional boolean tensor broadcastable to
            `(batch, 1, length, K)`: `True` where a query may use a slot.
        scale: float, the factor of the query-key dot products.
        logit_scale: optional float tensor broadcastable to
            `(batch, 1, 1, 1)` that multiplies the logits.
        dropout: optional function applied to the weights
            `(batch, heads, length, K)`.
        implementation: `"auto"`, `"reference"` or `"native"` (a
            `ValueError` where no native implementation can run).

    Returns:
        `(context, weights)`: `(batch, length, heads, value_dim)` and
        `(batch, heads, length, K)`.

    Example:

    >>> from keras_attn import kernels
    >>> x = np.ones((1, 4, 1, 2), "float32")
    >>> _, weights = kernels.offset_attention(x, x, x, (0, 2), scale=1.0)
    >>> keras.ops.convert_to_numpy(weights)[0, 0].tolist()
    [[1.0, 0.0], [1.0, 0.0], [0.5, 0.5], [0.5, 0.5]]
    """
    offsets = _checked_offsets(offsets)
    query, key, value = (ops.convert_to_tensor(x) for x in (query, key, value))
    native = native_kernel("offset_attention", implementation)
    query = query * ops.cast(scale, query.dtype)
    if native is not None:
        mask = None if mask is None else ops.convert_to_tensor(mask, "bool")
        logit_scale = None if logit_scale is None else ops.convert_to_tensor(logit_scale)
        return native(query, key, value, offsets, mask, logit_scale=logit_scale, dropout=dropout)
    allowed = _slots_in_range(offsets, ops.shape(query)[1], mask)  # (batch or 1, 1, length, K)
    logits = _offset_logits(query, key, offsets)  # (batch, length, heads, K)
    logits = ops.transpose(logits, (0, 2, 1, 3))  # (batch, heads, length, K)
    weights = masked_softmax(logits, allowed, logit_scale, dtype=value.dtype)
    if dropout is not None:
        weights = dropout(weights)
    slot_weights = ops.transpose(weights, (0, 2, 1, 3))  # (batch, length, heads, K)
    return _offset_context(slot_weights, value, offsets), weights


def gathered_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    indices: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float,
    logit_scale: Tensor | None = None,
    dropout: Callable[[Tensor], Tensor] | None = None,
) -> tuple[Tensor, Tensor]:
    """Attention of query `i` over the keys `indices[i]`, gathered.

    For any pattern of `K` keys per query, such as one whose slots depend on
    the length known only at run time. The keys and values of each query's
    slots are gathered, `O(length * K)` of each (a few large kernels rather
    than a loop); `keras.ops` only. A query with no used slot outputs
    zeros; the softmax runs in float32 and the weights come in `value`'s
    dtype.

    Args:
        query: `(batch, length, heads, key_dim)`.
        key: `(batch, length, heads, key_dim)`.
        value: `(batch, length, heads, value_dim)`.
        indices: int `(length, K)`, the key position of each query's slots.
        mask: optional boolean tensor broadcastable to
            `(batch, 1, length, K)`: `True` where a query may use a slot.
        scale: float, the factor of the query-key dot products.
        logit_scale: optional float tensor broadcastable to
            `(batch, 1, 1, 1)` that multiplies the logits.
        dropout: optional function applied to the weights
            `(batch, heads, length, K)`.

    Returns:
        `(context, weights)`: `(batch, length, heads, value_dim)` and
        `(batch, heads, length, K)`.

    Example:

    >>> from keras_attn import kernels
    >>> x = np.ones((1, 3, 1, 2), "float32")
    >>> indices = np.array([[0, 0], [0, 1], [1, 2]])
    >>> context, weights = kernels.gathered_attention(x, x, x, indices, scale=1.0)
    >>> tuple(context.shape), tuple(weights.shape)
    ((1, 3, 1, 2), (1, 1, 3, 2))
    """
    query, key, value = (ops.convert_to_tensor(x) for x in (query, key, value))
    query = query * ops.cast(scale, query.dtype)
    gathered_keys = gather_positions(key, indices)  # (length, K, batch, heads, key_dim)
    gathered_values = gather_positions(value, indices)  # (length, K, batch, heads, value_dim)
    # Products and sums rather than einsums: as a matmul, each query is
    # a batch of its own (1, key_dim) x (key_dim, K) product.
    by_position = ops.transpose(query, (1, 0, 2, 3))  # (length, batch, heads, dim)
    by_position = ops.expand_dims(by_position, 1)  # (length, 1, batch, heads, dim)
    logits = ops.sum(by_position * gathered_keys, axis=-1)  # (length, K, batch, heads)
    logits = ops.transpose(logits, (2, 3, 0, 1))  # (batch, heads, length, K)
    allowed = None if mask is None else ops.cast(mask, "bool")
    weights = masked_softmax(logits, allowed, logit_scale, dtype=value.dtype)
    if dropout is not None:
        weights = dropout(weights)
    slot_weights = ops.transpose(weights, (2, 3, 0, 1))  # (length, K, batch, heads)
    slot_weights = ops.expand_dims(slot_weights, -1)  # (length, K, batch, heads, 1)
    context = ops.sum(slot_weights * gathered_values, axis=1)  # (length, batch, heads, v_dim)
    return ops.transpose(context, (1, 0, 2, 3)), weights


def gather_positions(x: Tensor, indices: Tensor) -> Tensor:
    """`x[:, indices]` as `(*indices.shape, batch, heads, dim)`, a gather on axis 0.

    One `Gather` on axis 0 in every export. On torch it looks up rows of a
    2-D table (torch's `take` on a tensor of more axes exports to ONNX a
    `Squeeze` that ONNX Runtime rejects); elsewhere it gathers from the
    positions directly (jax2onnx cannot reshape the table, whose width
    multiplies the unknown batch size).

    Args:
        x: `(batch, length, heads, dim)`.
        indices: int tensor of positions in `[0, length)`.

    Returns:
        `(*indices.shape, batch, heads, dim)`.

    Example:

    >>> from keras_attn import kernels
    >>> x = np.arange(6, dtype="float32").reshape(1, 3, 1, 2)
    >>> rows = kernels.gather_positions(x, np.array([[2, 0]]))
    >>> keras.ops.convert_to_numpy(rows)[0, :, 0, 0].tolist()
    [[4.0, 5.0], [0.0, 1.0]]
    """
    positions = ops.transpose(x, (1, 0, 2, 3))  # (length, batch, heads, dim)
    if keras.backend.backend() != "torch":
        return ops.take(positions, indices, axis=0)  # (*indices.shape, batch, heads, dim)
    table = ops.reshape(positions, (ops.shape(x)[1], -1))  # (length, batch * heads * dim)
    rows = ops.take(table, ops.reshape(indices, (-1,)), axis=0)  # (length * K, batch * heads * dim)
    return ops.reshape(rows, (*ops.shape(indices), *ops.shape(positions)[1:]))


def _checked_offsets(offsets):
    """`offsets` as a tuple of Python ints `>= 0`; a `ValueError` for anything else."""
    valid = isinstance(offsets, (tuple, list)) and len(offsets) > 0
    valid = valid and all(
        isinstance(o, numbers.Integral) and not isinstance(o, bool) and o >= 0 for o in offsets
    )
    if not valid:
        raise ValueError(
            f"`offsets` must be a non-empty tuple of ints >= 0. Received: offsets={offsets!r}"
        )
    return tuple(int(o) for o in offsets)


def _slots_in_range(offsets, length, mask):
    """Boolean `(batch or 1, 1, length, K)`: the slots of `mask` that reach a position."""
    positions = ops.expand_dims(sequence_positions(length), 1)  # (length, 1)
    reach = positions >= ops.convert_to_tensor([list(offsets)], "int32")  # (length, K)
    reach = ops.expand_dims(reach, (0, 1))  # (1, 1, length, K)
    return reach if mask is None else ops.logical_and(ops.cast(mask, "bool"), reach)


def _offset_logits(query, key, offsets):
    """`_dots(query, key)` with a gradient that keeps no shifted copy, `(b, length, heads, K)`.

    The gradients are themselves sums over offsets of shifted views
    (`dq = mix(g, key)`, `dk = scatter(g, query)`), so the backward pass,
    like the forward one, holds one key-sized accumulator per sum at a time.
    """
    length = query.shape[1]

    @ops.custom_gradient
    def logits(query, key):
        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return _offset_loops(offsets, length, _mix(upstream, key), _scatter(upstream, query))

        return _offset_loops(offsets, length, _dots(query, key, offsets))[0], grad

    return logits(query, key)


def _offset_context(weights, value, offsets):
    """`_mix(weights, value)` with a gradient that keeps no shifted copy, `(b, length, h, v)`."""
    length = value.shape[1]

    @ops.custom_gradient
    def context(weights, value):
        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return _offset_loops(
                offsets, length, _dots(upstream, value, offsets), _scatter(weights, upstream)
            )

        return _offset_loops(offsets, length, _mix(weights, value))[0], grad

    return context(weights, value)


class _Slots:
    """The slots of `offsets` that reach a key (`offset < length`), for a loop over them.

    `slot(n)` and `shift(n)` are the slot number and offset of the `n`-th
    reachable slot: Python ints when the loop index is one (`fori_loop`
    runs as a Python loop on torch), so each step slices statically with no
    read-back of a tensor index to the host, and int32 scalars read from a
    constant table when the loop is compiled (a `while` loop under XLA).
    The tables are made inside the step that reads them: made outside, they
    are arrays the loop body closes over, which jax2onnx cannot lower.
    """

    def __init__(self, offsets, length):
        used = [(slot, offset) for slot, offset in enumerate(offsets) if offset < length]
        self.slots = [slot for slot, _ in used]
        self.shifts = [offset for _, offset in used]
        self.count = len(used)
        self.reach = max(self.shifts, default=0)

    def slot(self, n):
        return self.slots[n] if isinstance(n, int) else _read(self.slots, n)

    def shift(self, n):
        return self.shifts[n] if isinstance(n, int) else _read(self.shifts, n)

    def write(self, logits, n, column):
        """`logits` `(batch, length, heads, K)` with slot `slot(n)` set to `column`.

        Under XLA a select, which exports to ONNX from TensorFlow (a dynamic
        update does not).
        """
        if isinstance(n, int):
            return ops.slice_update(logits, (0, 0, 0, self.slots[n]), column)
        slot_ids = ops.arange(0, logits.shape[-1], dtype="int32")  # (K,)
        return ops.where(slot_ids == self.slot(n), column, logits)

    def weights(self, weights, n):
        """`weights[..., slot(n), None]`, `(batch, length, heads, 1)`."""
        if isinstance(n, int):
            return weights[..., self.slots[n], None]
        return ops.take(weights, self.slot(n), axis=-1)[..., None]


def _read(values, n):
    """`values[n]` for a list of ints and a tensor index, from an int32 constant."""
    return ops.take(ops.convert_to_tensor(values, "int32"), n)


# The sums over offsets below run as loops (one shifted view alive at a
# time): written as unrolled Python loops, XLA materializes every shifted
# view, K copies of the keys and values. Each is a `(make_step, initial
# value)` pair; `make_step(slots)` returns the step and the arrays it
# reads, and `_offset_loops` runs several sums as one loop, so that the
# backward pass runs two loops over the offsets, not four.


def _offset_loops(offsets, length, *sums):
    """The totals of `sums`, `(make_step, initial)` pairs, from one loop over the slots."""
    slots = _Slots(offsets, length)
    steps, held = zip(*(make_step(slots) for make_step, _ in sums), strict=True)

    def step(n, totals, arrays):
        return tuple(
            step(n, total, *reads) for step, total, reads in zip(steps, totals, arrays, strict=True)
        )

    return loop(slots.count, step, tuple(initial for _, initial in sums), held)


def _dots(a, b, offsets):
    """`a[:, i] . b[:, i - offset]` per head and offset, `(batch, length, heads, K)`."""

    def make_step(slots):
        back = slots.reach

        def step(n, logits, a, padded_b):
            view = window(padded_b, back - slots.shift(n), b.shape[1])  # b[:, i - offset]
            # The sum over `dim` as a product with ones: written as a sum, JAX's
            # XLA CPU hands it to a reduce fusion that made the step 3-6x slower.
            summed = ops.ones((a.shape[-1], 1), a.dtype)  # (dim, 1)
            dots = ops.matmul(a * view, summed)  # (batch, length, heads, 1)
            return slots.write(logits, n, dots)

        return step, (a, padded(b, back, 0))  # padded: (batch, back + length, heads, dim)

    slot_logits = ops.zeros_like(a[..., :1]) + ops.zeros((len(offsets),), a.dtype)
    return make_step, slot_logits  # (batch, length, heads, K)


def _mix(weights, b):
    """`sum_j weights[:, i, :, j] * b[:, i - offsets[j]]`, `(batch, length, heads, dim)`."""

    def make_step(slots):
        back = slots.reach

        def step(n, total, weights, padded_b):
            view = window(padded_b, back - slots.shift(n), b.shape[1])  # b[:, i - offset]
            return total + slots.weights(weights, n) * view

        return step, (weights, padded(b, back, 0))  # padded: (batch, back + length, heads, dim)

    return make_step, ops.zeros_like(b)


def _scatter(weights, a):
    """The transpose of `_mix` in `b`: `sum_j (weights_j * a)[:, i + offsets[j]]`."""

    def make_step(slots):
        def step(n, total, padded_weights, padded_a):
            shift = slots.shift(n)
            column = slots.weights(padded_weights, n)  # (batch, length + reach, heads, 1)
            slot_weights = window(column, shift, a.shape[1])  # (batch, length, heads, 1)
            view = window(padded_a, shift, a.shape[1])  # a[:, i + offset]
            return total + slot_weights * view  # (weights_j * a)[:, i + o_j]

        # (batch, length + reach, heads, K) and (batch, length + reach, heads, dim)
        return step, (padded(weights, 0, slots.reach), padded(a, 0, slots.reach))

    return make_step, ops.zeros_like(a)
