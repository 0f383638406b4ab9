"""Blockwise dense attention: blocks of queries over blocks of keys, with an online softmax."""

import functools

from keras import ops

from keras_attn._typing import Tensor
from keras_attn.kernels._shared import MASKED_LOGIT, loop, padded, window

# The block of queries (at most half the length, so that a causal step skips
# the masked blocks) and the most blocks (each block is unrolled in the
# compiled step, so longer sequences get longer blocks rather than more).
# Small blocks keep a step's operands in cache: 256 queries over 64 keys per
# step, (256, 64) logits per head, ran faster under XLA on the CPU (JAX; as
# fast or faster on TensorFlow) than 1024 over 128 or 512 over 32, the sizes
# timed in one process (forward+backward as in benchmarks/attention_speed.py);
# 32 keys per step loop too often at 16,384 positions.
BLOCK_SIZE = 256
MAX_BLOCKS = 32
KEY_BLOCK_SIZE = 64


def blockwise_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    *,
    scale: float,
    causal: bool = False,
    block_size: int = BLOCK_SIZE,
    key_block_size: int = KEY_BLOCK_SIZE,
) -> Tensor:
    """Dense or causal attention one block of queries at a time, without masks.

    What `dense_attention(query, key, value, scale=scale, causal=causal)`
    computes, in `keras.ops` only. Each block of queries attends to the
    keys it may see (under `causal`, those up to its last query: fully
    masked blocks are never computed) in a loop over blocks of
    `key_block_size` keys with an online softmax (a running maximum, sum
    and output), and a custom gradient recomputes each step's weights from
    the saved log-sum-exp: neither pass holds more than a
    `(block, key_block_size)` slice of the weights per head, so XLA on a
    CPU, whose own dense attention builds the whole `(length, length)`
    matrix, runs long sequences faster. Query blocks have `block_size`
    queries, at most half the length, and more when the length exceeds
    `MAX_BLOCKS` (32) such blocks (each block is unrolled in a compiled
    step). Only the key blocks on a causal block's diagonal and the padded
    last one are masked. Computed in float32 and returned in `value`'s dtype (the
    gradients in their inputs' dtypes).

    Args:
        query: `(batch, length, heads, key_dim)`.
        key: `(batch, length, heads, key_dim)`.
        value: `(batch, length, heads, value_dim)`.
        scale: float, the factor of the query-key dot products.
        causal: bool, whether a query sees no key after its position.
        block_size: int, the most queries per block.
        key_block_size: int, keys per step of a block's loop.

    Returns:
        `(batch, length, heads, value_dim)`.

    Example:

    >>> from keras_attn import kernels
    >>> x = np.random.default_rng(0).normal(size=(1, 10, 2, 4)).astype("float32")
    >>> blocks = kernels.blockwise_attention(x, x, x, scale=0.5, causal=True, block_size=4,
    ...                                      key_block_size=3)
    >>> dense, _ = kernels.dense_attention(x, x, x, scale=0.5, causal=True)
    >>> bool(np.allclose(blocks, dense, atol=1e-5))
    True
    """
    query, key, value = (ops.convert_to_tensor(x) for x in (query, key, value))
    length = query.shape[1]
    block = max(min(block_size, length // 2), -(-length // MAX_BLOCKS))
    dtypes = [x.dtype for x in (query, key, value)]

    @ops.custom_gradient
    def attend(query, key, value):
        blocks = _KeyBlocks(key, value, key_block_size, causal)
        # Scaled once, heads first as every block's products read it.
        query = _swap_length_and_heads(ops.cast(query, "float32") * scale)  # (b, h, length, d)
        outputs, log_sums = [], []
        for start, end, keys in _query_blocks(length, block, causal):
            output, log_sum = _attend_block(query[:, :, start:end], start, blocks, keys)
            outputs.append(output)
            log_sums.append(log_sum)
        output = ops.concatenate(outputs, axis=2)  # (batch, heads, length, value_dim)
        log_sum = ops.concatenate(log_sums, axis=2)  # (batch, heads, length, 1)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            upstream = _swap_length_and_heads(ops.cast(upstream, "float32"))  # (b, h, length, v)
            grads = _gradients(query, blocks, output, log_sum, upstream, block, scale)
            return tuple(ops.cast(g, dtype) for g, dtype in zip(grads, dtypes, strict=True))

        return ops.cast(_swap_length_and_heads(output), dtypes[2]), grad

    return attend(query, key, value)


def _swap_length_and_heads(x):
    """`(batch, length, heads, dim)` as `(batch, heads, length, dim)`, and back."""
    return ops.transpose(x, (0, 2, 1, 3))


def _query_blocks(length, block, causal):
    """`(start, end, keys)` per block of queries: queries `[start, end)` see keys `[0, keys)`."""
    for start in range(0, length, block):
        end = min(start + block, length)
        yield start, end, end if causal else length


class _KeyBlocks:
    """Keys and values cut into blocks of `size`, for loops that read one block at a time.

    Keys and values are zero-padded to a whole number of blocks and held
    heads first, float32. The padding, like the future under `causal`, is
    masked out of the logits of the blocks that hold any (see `spans`).
    """

    def __init__(self, key, value, size, causal):
        self.length, self.size, self.causal = key.shape[1], size, causal
        tail = -self.length % size
        key, value = (
            _swap_length_and_heads(ops.cast(padded(x, 0, tail), "float32")) for x in (key, value)
        )
        self.key = key  # (batch, heads, blocks * size, key_dim)
        self.value = value  # (batch, heads, blocks * size, value_dim)

    def count(self, keys):
        """The number of blocks that hold keys `[0, keys)`."""
        return -(-keys // self.size)

    def spans(self, start, keys):
        """`(first, count, masked)` of the blocks seen from queries `start...`, up to keys `keys`.

        The fully visible blocks (no padding, and under `causal` no key
        after `start`) come first, unmasked; the others, the diagonal and
        the padded last block, are masked.
        """
        visible = self.length // self.size
        if self.causal:
            visible = min(visible, (start + 1) // self.size)
        visible = min(visible, self.count(keys))
        spans = ((0, visible, False), (visible, self.count(keys) - visible, True))
        return [span for span in spans if span[1]]

    def start(self, n):
        return n * self.size

    def block(self, padded, n):
        """Block `n` of `padded` keys or values, `(batch, heads, size, dim)`."""
        return window(padded, self.start(n), self.size, axis=2)

    def logits(self, query_block, key, start, n, masked):
        """Logits of scaled queries `start...` on block `n` of `key`, `(b, h, q, size)`."""
        logits = ops.einsum("bhqd,bhkd->bhqk", query_block, self.block(key, n))
        if not masked:
            return logits
        rows = ops.arange(start, start + query_block.shape[2])[:, None]  # (q, 1)
        columns = ops.arange(0, self.size)[None, :] + self.start(n)  # (1, size)
        allowed = columns < self.length
        if self.causal:
            allowed = allowed & (rows >= columns)
        return ops.where(allowed, logits, MASKED_LOGIT)


def _loop_over_spans(blocks, start, keys, make_step, carry, held):
    """`carry` after the loop steps `make_step(masked)` over each of `blocks.spans`."""
    for first, count, masked in blocks.spans(start, keys):
        carry = loop(count, make_step(masked), carry, held, first)
    return carry


def _attend_block(query_block, start, blocks, keys):
    """One block of queries over the key blocks holding keys `[0, keys)`, online softmax.

    Returns its output `(batch, heads, q, value_dim)` and its log-sum-exp
    `(batch, heads, q, 1)`.
    """

    def make_step(masked):
        def step(n, carry, held):
            query_block, key, value = held
            peak, total, output = carry
            logits = blocks.logits(query_block, key, start, n, masked)  # (batch, heads, q, size)
            new_peak = ops.maximum(peak, ops.max(logits, axis=-1, keepdims=True))
            weights = ops.exp(logits - new_peak)
            decay = ops.exp(peak - new_peak)  # (batch, heads, q, 1)
            total = total * decay + ops.sum(weights, axis=-1, keepdims=True)
            values = blocks.block(value, n)  # (batch, heads, size, value_dim)
            update = ops.einsum("bhqk,bhkd->bhqd", weights, values)  # (batch, heads, q, v)
            return new_peak, total, output * decay + update

        return step

    # Zeros made from the queries, not from their shape: a symbolic batch
    # (an export's) cannot size `ops.full` in jax2onnx.
    row_statistic = ops.zeros_like(query_block[..., :1])  # (batch, heads, q, 1)
    output = row_statistic + ops.zeros((blocks.value.shape[-1],), "float32")  # (b, h, q, v)
    initial = (row_statistic + MASKED_LOGIT, row_statistic, output)
    held = (query_block, blocks.key, blocks.value)
    peak, total, output = _loop_over_spans(blocks, start, keys, make_step, initial, held)
    return output / total, peak + ops.log(total)


def _gradients(query, blocks, output, log_sum, upstream, block, scale):
    """The gradients in query, key and value, each block's weights recomputed.

    `query`, `output` and `upstream` are heads first, `query` scaled; the
    gradients are returned `(batch, length, heads, dim)`.
    """
    length = query.shape[2]
    # (batch, heads, length, 1): sum_d dO * O, the softmax's correction term.
    correction = ops.sum(upstream * output, axis=-1, keepdims=True)
    query_grads = []
    key_grad, value_grad = ops.zeros_like(blocks.key), ops.zeros_like(blocks.value)
    for start, end, keys in _query_blocks(length, block, blocks.causal):
        rows = slice(start, end)
        held = tuple(x[:, :, rows] for x in (query, upstream, log_sum, correction))
        held = (*held, blocks.key, blocks.value)
        initial = (ops.zeros_like(query[:, :, rows]), key_grad, value_grad)
        make_step = functools.partial(_gradient_step, start, blocks)
        carry = _loop_over_spans(blocks, start, keys, make_step, initial, held)
        query_grad, key_grad, value_grad = carry
        query_grads.append(query_grad)
    # The logits' gradients were in the scaled query's products: the query's takes `scale`.
    query_grad = ops.concatenate(query_grads, axis=2) * scale  # (batch, heads, length, key_dim)
    key_grad, value_grad = (x[:, :, : blocks.length] for x in (key_grad, value_grad))
    return tuple(_swap_length_and_heads(x) for x in (query_grad, key_grad, value_grad))


def _gradient_step(start, blocks, masked):
    """The loop step over key blocks of the gradients of the query block from `start`."""

    def step(n, carry, held):
        query_block, upstream_block, log_sum, correction, key, value = held
        query_grad, key_grad, value_grad = carry
        logits = blocks.logits(query_block, key, start, n, masked)  # (batch, heads, q, k)
        weights = ops.exp(logits - log_sum)
        values = blocks.block(value, n)  # (batch, heads, k, value_dim)
        weight_grads = ops.einsum("bhqd,bhkd->bhqk", upstream_block, values)  # (b, h, q, k)
        logit_grads = weights * (weight_grads - correction)  # (batch, heads, q, k)
        keys = blocks.block(key, n)  # (batch, heads, k, key_dim)
        query_grad = query_grad + ops.einsum("bhqk,bhkd->bhqd", logit_grads, keys)
        key_part = ops.einsum("bhqk,bhqd->bhkd", logit_grads, query_block)  # (batch, h, k, d)
        value_part = ops.einsum("bhqk,bhqd->bhkd", weights, upstream_block)  # (batch, h, k, v)
        key_grad = _add_to_block(key_grad, blocks, n, key_part)
        value_grad = _add_to_block(value_grad, blocks, n, value_part)
        return query_grad, key_grad, value_grad

    return step


def _add_to_block(total, blocks, n, part):
    """`total` with `part` added to key block `n` (in place under XLA)."""
    start = blocks.start(n)
    current = blocks.block(total, n)
    return ops.slice_update(total, (0, 0, start, 0), current + part)
