"""Numpy references that layer tests compare against."""

import math

import keras
import numpy as np
from keras import ops

from keras_attn._optional import require
from keras_attn.utils.numpy_math import softmax


def self_attention_reference(
    x, layer, allowed=None, head_mask=None, logit_scale=None, additive_mask=None, qk_scale=None
):
    """Multi-head self-attention in numpy with the weights of `layer`.

    Args:
        x: `(batch, length, dim)` array.
        layer: a built `MultiHeadSelfAttention` or `keras.layers.MultiHeadAttention`.
        allowed: boolean mask broadcastable to `(batch, heads, length, length)`;
            rows without an allowed key give zeros.
        head_mask: `(heads,)` or `(batch, heads)` multipliers of head outputs.
        logit_scale: array broadcastable to the logits that multiplies them.
        additive_mask: `None`, or a float added (in float32) to the logits of
            keys that are not allowed, which then all stay in the softmax.
        qk_scale: factor of the query-key dot products; `None` gives
            `1 / sqrt(key_dim)`.

    Returns:
        `(output, weights)`: `(batch, length, out_dim)` and
        `(batch, heads, length, length)`.
    """
    wq, wk, wv, wo = (
        _numpy(d.kernel)
        for d in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
    )
    biases = [
        _numpy(d.bias) if d.bias is not None else 0.0
        for d in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
    ]
    x = _numpy(x)
    q = np.einsum("blc,chd->blhd", x, wq) + biases[0]  # (batch, length, heads, key_dim)
    k = np.einsum("blc,chd->blhd", x, wk) + biases[1]  # (batch, length, heads, key_dim)
    v = np.einsum("blc,chd->blhd", x, wv) + biases[2]  # (batch, length, heads, value_dim)
    if qk_scale is None:
        qk_scale = 1.0 / np.sqrt(wq.shape[-1])
    logits = np.einsum("bqhd,bkhd->bhqk", q, k) * qk_scale  # (batch, heads, q, k)
    if logit_scale is not None:
        logits = logits * logit_scale
    if allowed is None:
        allowed = np.ones(logits.shape, bool)
    allowed = np.broadcast_to(allowed, logits.shape)
    if additive_mask is None:
        weights = softmax(np.where(allowed, logits, -1e30))
        weights = np.where(allowed.any(-1, keepdims=True), weights * allowed, 0.0)
    else:
        masked = logits.astype(np.float32) + np.where(allowed, 0.0, additive_mask).astype(
            np.float32
        )
        weights = softmax(masked.astype(np.float64))
    context = np.einsum("bhqk,bkhd->bqhd", weights, v)  # (batch, length, heads, value_dim)
    if head_mask is not None:
        head_mask = np.asarray(head_mask, dtype=context.dtype)
        context = context * head_mask.reshape(-1, 1, wq.shape[1], 1)
    output = np.einsum("bqhd,hdc->bqc", context, wo) + biases[3]  # (batch, length, out_dim)
    return output, weights


def transformer_block_reference(x, block, mask=None, head_mask=None, attention_mask=None):
    """A `TransformerBlock` at inference in numpy with the weights of `block`.

    Pre-norm: `h = x + attn(LN(x))`, `h + mlp(LN(h))`; post-norm:
    `h = LN(x + attn(x))`, `LN(h + mlp(h))`, where `mlp(h)` is
    `W2 act(W1 h + b1) + b2`.

    Args:
        x: `(batch, length, dim)` array.
        block: a built `TransformerBlock` whose attention is the default
            `MultiHeadSelfAttention` (dense pattern, default scale).
        mask: optional `(batch, length)` padding mask, nonzero at real tokens.
        head_mask: `(heads,)` or `(batch, heads)` multipliers of head outputs.
        attention_mask: optional `(batch, length, length)` mask, nonzero where a
            query may attend to a key; combined with `mask`.

    Returns:
        `(batch, length, dim)` float64 array.
    """
    x = _numpy(x).astype("float64")
    allowed = None if mask is None else _numpy(mask)[:, None, None, :] > 0  # (batch, 1, 1, keys)
    if attention_mask is not None:
        pairs = _numpy(attention_mask)[:, None] > 0  # (batch, 1, queries, keys)
        allowed = pairs if allowed is None else allowed & pairs
    activation = numpy_activation(block.activation)

    def attention(h):
        return self_attention_reference(h, block.attention, allowed, head_mask)[0]

    def mlp(h):
        hidden = activation(h @ _numpy(block.mlp_hidden.kernel) + _numpy(block.mlp_hidden.bias))
        return hidden @ _numpy(block.mlp_output.kernel) + _numpy(block.mlp_output.bias)

    def attention_norm(h):
        return _layer_norm_of(block.attention_norm, h)

    def mlp_norm(h):
        return _layer_norm_of(block.mlp_norm, h)

    if block.normalize_first:
        h = x + attention(attention_norm(x))  # (batch, length, dim)
        return h + mlp(mlp_norm(h))
    h = attention_norm(x + attention(x))  # (batch, length, dim)
    return mlp_norm(h + mlp(h))


def layer_norm(x, gamma, beta, epsilon):
    """Layer normalization over the last axis."""
    mean = x.mean(-1, keepdims=True)
    variance = np.square(x - mean).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def numpy_activation(activation):
    """A numpy function for a Keras activation (exact erf GELU, ReLU, linear)."""
    name = getattr(activation, "__name__", "")
    if name == "gelu":
        erf = require("scipy.special", "reproduce").erf
        return lambda x: 0.5 * x * (1.0 + erf(x / math.sqrt(2.0)))
    if name == "relu":
        return lambda x: np.maximum(x, 0.0)
    if name == "linear":
        return lambda x: x
    return lambda x: keras.ops.convert_to_numpy(activation(x))


def _layer_norm_of(norm, x):
    return layer_norm(x, _numpy(norm.gamma), _numpy(norm.beta), norm.epsilon)


def attention_num_params(
    hidden_dim, num_heads, key_dim, output_dim=None, kernel_size=1, use_bias=True
):
    """Scalars in a `MultiHeadSelfAttention` (or convolutional) layer's weights.

    Query and key kernels `(kernel_size, hidden_dim, heads, key_dim)`, value kernel
    `(hidden_dim, heads, key_dim)`, output kernel `(heads, key_dim, output_dim)`,
    each with a bias of its output shape when `use_bias`.
    """
    output_dim = output_dim or hidden_dim
    width = num_heads * key_dim
    query_key = 2 * (kernel_size * hidden_dim * width + use_bias * width)
    value = hidden_dim * width + use_bias * width
    output = width * output_dim + use_bias * output_dim
    return query_key + value + output


def _numpy(value):
    return ops.convert_to_numpy(value)
