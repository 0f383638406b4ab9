"""Dense attention: each query over every key it may see."""

from collections.abc import Callable

from keras import ops

from keras_attn._typing import Tensor
from keras_attn.kernels._shared import causal_mask, masked_softmax, native_kernel


def dense_attention(
    query: Tensor,
    key: Tensor,
    value: Tensor,
    mask: Tensor | None = None,
    *,
    scale: float,
    causal: bool = False,
    logit_scale: Tensor | None = None,
    additive_mask: float | None = None,
    dropout: Callable[[Tensor], Tensor] | None = None,
    return_weights: bool = False,
    implementation: str = "auto",
) -> tuple[Tensor, Tensor | None]:
    """`softmax(logit_scale * scale * Q K^T) V` per head, over the keys each query may see.

    The queries are the last `queries` of the `length` positions (all of
    them when `queries == length`, the last ones only for a model that
    scores its last positions). A query with no visible key outputs zeros;
    with `additive_mask`, it attends over every key instead. The softmax
    runs in float32; the weights come in `value`'s dtype.

    The reference implementation computes the `(queries, length)` weights
    of each head with `keras.ops`. The native one, chosen by
    `implementation="auto"` without weights, dropout or `additive_mask` and
    with `key_dim == value_dim` (and, if `causal`, as many queries as keys:
    two unknown static sizes count as equal), is the backend's fused
    kernel: torch's `scaled_dot_product_attention`, JAX's
    `jax.nn.dot_product_attention` (cuDNN flash attention on a GPU where it
    applies) and, on TensorFlow, `keras.ops.dot_product_attention` (XLA).

    Args:
        query: `(batch, queries, heads, key_dim)`.
        key: `(batch, length, heads, key_dim)`.
        value: `(batch, length, heads, value_dim)`.
        mask: optional boolean tensor broadcastable to
            `(batch, 1, queries, length)`: `True` where a query may see a key.
        scale: float, the factor of the query-key dot products.
        causal: bool, whether a query also sees no key after its position.
        logit_scale: optional float tensor broadcastable to
            `(batch, 1, 1, 1)` that multiplies the logits, such as a
            log-length scale.
        additive_mask: `None`, or a negative float added to the logits of
            the keys a query may not see (which then stay in its softmax).
        dropout: optional function applied to the weights
            `(batch, heads, queries, length)`, such as a dropout layer in
            training.
        return_weights: bool, whether to return the weights.
        implementation: `"auto"`, `"reference"` or `"native"` (a
            `ValueError` where no native implementation can run).

    Returns:
        `(context, weights)`: `(batch, queries, heads, value_dim)` and
        `(batch, heads, queries, length)`, or `None` without
        `return_weights`.

    Example:

    >>> from keras_attn import kernels
    >>> q = k = v = np.ones((1, 3, 2, 4), "float32")
    >>> context, weights = kernels.dense_attention(
    ...     q, k, v, scale=0.5, causal=True, return_weights=True)
    >>> keras.ops.convert_to_numpy(weights)[0, 0].round(2).tolist()
    [[1.0, 0.0, 0.0], [0.5, 0.5, 0.0], [0.33, 0.33, 0.33]]
    """
    query, key, value = (ops.convert_to_tensor(x) for x in (query, key, value))
    native = native_kernel(
        "dense_attention",
        implementation,
        _blocking_argument(query, key, value, causal, additive_mask, dropout, return_weights),
    )
    if native is not None:
        return _fused(native, query, key, value, mask, scale, causal, logit_scale), None
    query = query * ops.cast(scale, query.dtype)
    logits = ops.einsum("bqhd,bkhd->bhqk", query, key)  # (batch, heads, queries, length)
    allowed = _allowed(mask, causal, ops.shape(query)[1], ops.shape(key)[1])
    weights = masked_softmax(logits, allowed, logit_scale, additive_mask, value.dtype)
    if dropout is not None:
        weights = dropout(weights)
    context = ops.einsum("bhqk,bkhd->bqhd", weights, value)  # (batch, queries, heads, v_dim)
    return context, weights if return_weights else None


def rows_with_keys(mask: Tensor | None, causal: bool, queries: int | Tensor) -> Tensor | None:
    """Boolean `(batch, queries or 1)`: whether each query sees a key.

    For the `mask` and `causal` of `dense_attention`, the queries being the
    last `queries` positions; `None` when every query sees a key (without a
    mask, each query sees itself or every key).
    """
    if mask is None:
        return None
    mask = ops.cast(mask, "bool")[:, 0]  # (batch, queries or 1, length)
    if not causal:
        return ops.any(mask, axis=-1)
    if mask.shape[1] == 1:  # the same keys for every query: seen once one is at or before it
        length = ops.shape(mask)[2]
        seen = ops.cumsum(ops.cast(mask[:, 0], "int32"), axis=1) > 0  # (batch, length)
        return seen[:, length - queries :]
    return ops.any(ops.logical_and(mask, causal_mask(queries, ops.shape(mask)[2])), axis=-1)


def _blocking_argument(query, key, value, causal, additive_mask, dropout, return_weights):
    """The argument that rules out a fused kernel, or `None` if none does."""
    blocking = {
        "return_weights=True": return_weights,
        "dropout": dropout is not None,
        "additive_mask": additive_mask is not None,
        "a value_dim other than key_dim": query.shape[-1] != value.shape[-1],
        "causal=True and fewer queries than keys": causal and query.shape[1] != key.shape[1],
    }
    return next((name for name, blocks in blocking.items() if blocks), None)


def _fused(native, query, key, value, mask, scale, causal, logit_scale):
    """`native` on `query` scaled by `logit_scale`; rows with no visible key set to zero.

    The value is cast to the query's dtype (float32 for float16 inputs,
    whose queries and keys come in float32) and the context back to the
    value's.
    """
    if logit_scale is not None:
        query = query * ops.cast(logit_scale, query.dtype)
    mask = None if mask is None else ops.convert_to_tensor(mask, "bool")
    context = native(query, key, ops.cast(value, query.dtype), mask, scale=scale, causal=causal)
    context = ops.cast(context, value.dtype)  # (batch, queries, heads, value_dim)
    rows = rows_with_keys(mask, causal, ops.shape(query)[1])
    if rows is None:
        return context
    return ops.where(ops.expand_dims(rows, (2, 3)), context, ops.zeros((), context.dtype))


def _allowed(mask, causal, queries, length):
    """Boolean `(batch or 1, 1, queries or 1, length)` of `mask` and `causal`, or `None`."""
    allowed = None if mask is None else ops.cast(mask, "bool")
    if not causal:
        return allowed
    visible = ops.expand_dims(causal_mask(queries, length), (0, 1))  # (1, 1, queries, length)
    return visible if allowed is None else ops.logical_and(allowed, visible)
