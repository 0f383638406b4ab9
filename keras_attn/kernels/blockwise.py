"""Blockwise dense attention: blocks of queries over blocks of keys, with an online softmax."""

from keras import ops

from keras_attn._typing import Tensor
from keras_attn.kernels._shared import MASKED_LOGIT, loop, padded, window

# The block of queries (at most half the length, so that a causal step skips
# the masked blocks) and the most blocks (each block is unrolled in the
# compiled step, so longer sequences get longer blocks rather than more).
BLOCK_SIZE = 1024
MAX_BLOCKS = 16
# Keys per step of a query block's loop: its logits, (1024, 128) per head,
# stay in cache (benchmarks/attention_speed.py; 2 MB for 4 heads: blocks of
# 512 or 256 keys were slower).
KEY_BLOCK_SIZE = 128


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
    `MAX_BLOCKS` (16) such blocks (each block is unrolled in a compiled
    step). Computed in float32 and returned in `value`'s dtype (the
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
        query, key, value = (ops.cast(x, "float32") for x in (query, key, value))
        blocks = _KeyBlocks(key, value, key_block_size, scale, causal)
        outputs, log_sums = [], []
        for start, end, keys in _query_blocks(length, block, causal):
            output, log_sum = _attend_block(query[:, start:end], start, blocks, keys)
            outputs.append(output)
            log_sums.append(log_sum)
        output = ops.concatenate(outputs, axis=1)  # (batch, length, heads, value_dim)
        log_sum = ops.concatenate(log_sums, axis=2)  # (batch, heads, length, 1)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            upstream = ops.cast(upstream, "float32")
            grads = _gradients(query, blocks, output, log_sum, upstream, block)
            return tuple(ops.cast(g, dtype) for g, dtype in zip(grads, dtypes, strict=True))

        return ops.cast(output, dtypes[2]), grad

    return attend(query, key, value)


def _query_blocks(length, block, causal):
    """`(start, end, keys)` per block of queries: queries `[start, end)` see keys `[0, keys)`."""
    for start in range(0, length, block):
        end = min(start + block, length)
        yield start, end, end if causal else length


class _KeyBlocks:
    """Keys and values cut into blocks of `size`, for loops that read one block at a time.

    Keys and values are zero-padded to a whole number of blocks; the
    padding, like the future under `causal`, is masked out of every
    block's logits.
    """

    def __init__(self, key, value, size, scale, causal):
        self.length, self.size, self.scale, self.causal = key.shape[1], size, scale, causal
        tail = -self.length % size
        self.key = padded(key, 0, tail)  # (batch, blocks * size, heads, key_dim)
        self.value = padded(value, 0, tail)  # (batch, blocks * size, heads, value_dim)

    def count(self, keys):
        """The number of blocks that hold keys `[0, keys)`."""
        return -(-keys // self.size)

    def start(self, n):
        return n * self.size

    def block(self, padded, n):
        """Block `n` of `padded` keys or values, `(batch, size, heads, dim)`."""
        return window(padded, self.start(n), self.size)

    def logits(self, query_block, key, start, n):
        """Scaled float32 logits of queries `start...` on block `n` of `key`, `(b, h, q, size)`."""
        logits = ops.einsum("bqhd,bkhd->bhqk", query_block, self.block(key, n)) * self.scale
        rows = ops.arange(start, start + query_block.shape[1])[:, None]  # (q, 1)
        columns = ops.arange(0, self.size)[None, :] + self.start(n)  # (1, size)
        allowed = columns < self.length
        if self.causal:
            allowed = allowed & (rows >= columns)
        return ops.where(allowed, logits, MASKED_LOGIT)


def _attend_block(query_block, start, blocks, keys):
    """One block of queries over the key blocks holding keys `[0, keys)`, online softmax.

    Returns its output `(batch, q, heads, value_dim)` and its log-sum-exp
    `(batch, heads, q, 1)`.
    """

    def step(n, carry, held):
        query_block, key, value = held
        peak, total, output = carry
        logits = blocks.logits(query_block, key, start, n)  # (batch, heads, q, size)
        new_peak = ops.maximum(peak, ops.max(logits, axis=-1, keepdims=True))
        weights = ops.exp(logits - new_peak)
        decay = ops.exp(peak - new_peak)  # (batch, heads, q, 1)
        total = total * decay + ops.sum(weights, axis=-1, keepdims=True)
        values = blocks.block(value, n)  # (batch, size, heads, value_dim)
        update = ops.einsum("bhqk,bkhd->bqhd", weights, values)  # (batch, q, heads, value_dim)
        return new_peak, total, output * ops.transpose(decay, (0, 2, 1, 3)) + update

    # Zeros made from the queries, not from their shape: a symbolic batch
    # (an export's) cannot size `ops.full` in jax2onnx.
    column = ops.zeros_like(query_block[..., :1])  # (batch, q, heads, 1)
    row_statistic = ops.transpose(column, (0, 2, 1, 3))  # (batch, heads, q, 1)
    output = column + ops.zeros((blocks.value.shape[-1],), "float32")  # (batch, q, heads, v)
    initial = (row_statistic + MASKED_LOGIT, row_statistic, output)
    held = (query_block, blocks.key, blocks.value)
    peak, total, output = loop(blocks.count(keys), step, initial, held)
    return output / ops.transpose(total, (0, 2, 1, 3)), peak + ops.log(total)


def _gradients(query, blocks, output, log_sum, upstream, block):
    """The gradients in query, key and value, each block's weights recomputed."""
    length = query.shape[1]
    # (batch, heads, length, 1): sum_d dO * O, the softmax's correction term.
    correction = ops.expand_dims(ops.transpose(ops.sum(upstream * output, axis=-1), (0, 2, 1)), -1)
    query_grads = []
    key_grad, value_grad = ops.zeros_like(blocks.key), ops.zeros_like(blocks.value)
    for start, end, keys in _query_blocks(length, block, blocks.causal):
        rows = slice(start, end)
        held = (
            query[:, rows],
            upstream[:, rows],
            log_sum[:, :, rows],
            correction[:, :, rows],
            blocks.key,
            blocks.value,
        )
        initial = (ops.zeros_like(query[:, rows]), key_grad, value_grad)
        step = _gradient_step(start, blocks)
        query_grad, key_grad, value_grad = loop(blocks.count(keys), step, initial, held)
        query_grads.append(query_grad)
    unpadded = slice(0, blocks.length)
    return ops.concatenate(query_grads, axis=1), key_grad[:, unpadded], value_grad[:, unpadded]


def _gradient_step(start, blocks):
    """The loop step over key blocks of the gradients of the query block from `start`."""

    def step(n, carry, held):
        query_block, upstream_block, log_sum, correction, key, value = held
        query_grad, key_grad, value_grad = carry
        logits = blocks.logits(query_block, key, start, n)  # (batch, heads, q, k)
        weights = ops.exp(logits - log_sum)
        values = blocks.block(value, n)  # (batch, k, heads, value_dim)
        weight_grads = ops.einsum("bqhd,bkhd->bhqk", upstream_block, values)
        logit_grads = weights * (weight_grads - correction) * blocks.scale
        keys = blocks.block(key, n)  # (batch, k, heads, key_dim)
        query_grad = query_grad + ops.einsum("bhqk,bkhd->bqhd", logit_grads, keys)
        key_part = ops.einsum("bhqk,bqhd->bkhd", logit_grads, query_block)  # (batch, k, heads, d)
        value_part = ops.einsum("bhqk,bqhd->bkhd", weights, upstream_block)  # (batch, k, heads, v)
        key_grad = _add_to_block(key_grad, blocks, n, key_part)
        value_grad = _add_to_block(value_grad, blocks, n, value_part)
        return query_grad, key_grad, value_grad

    return step


def _add_to_block(total, blocks, n, part):
    """`total` with `part` added to key block `n` (in place under XLA)."""
    start = blocks.start(n)
    current = window(total, start, blocks.size)
    return ops.slice_update(total, (0, start, 0, 0), current + part)
