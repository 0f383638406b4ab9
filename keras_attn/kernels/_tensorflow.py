"""The TensorFlow implementations of the attention kernels.

TensorFlow has no fused attention of its own: its dense kernel is
`keras.ops.dot_product_attention`, compiled by XLA, as in
`keras.layers.MultiHeadAttention`.
"""

from keras import ops

from keras_attn.kernels._shared import causal_mask


def tracing():
    """Never: `keras.ops` traces in every graph."""
    return False


def dense_attention(query, key, value, mask, *, scale, causal):
    """`keras.ops.dot_product_attention` of `(batch, length, heads, dim)` tensors.

    The causal mask is passed as a mask: with `is_causal=True` Keras adds
    axes to its boolean mask by indexing (`mask[None, None]`), a strided
    slice that the LiteRT converter keeps as a TensorFlow op (Flex).
    """
    if causal:
        visible = causal_mask(ops.shape(query)[1], ops.shape(key)[1])  # (queries, length)
        mask = visible if mask is None else ops.logical_and(mask, visible)
    return ops.dot_product_attention(query, key, value, mask=mask, scale=scale)


NATIVE = {"dense_attention": dense_attention}
