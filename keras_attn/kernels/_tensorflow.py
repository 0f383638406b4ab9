"""The TensorFlow implementations of the attention kernels.

TensorFlow has no fused attention of its own: its dense kernel is
`keras.ops.dot_product_attention`, compiled by XLA, as in
`keras.layers.MultiHeadAttention`.
"""

from keras import ops


def tracing():
    """Never: `keras.ops` traces in every graph."""
    return False


def dense_attention(query, key, value, mask, *, scale, causal):
    """`keras.ops.dot_product_attention` of `(batch, length, heads, dim)` tensors."""
    return ops.dot_product_attention(query, key, value, mask=mask, scale=scale, is_causal=causal)


NATIVE = {"dense_attention": dense_attention}
