"""Analytic multiply-accumulate (MAC) counts of keras_attn models.

Counts the matrix products of each layer from its input shape, one MAC per
multiply-add, batch size 1, as the MACs columns of vision papers do:
projections, convolutions, attention logits and weighted sums. Layer norms,
activations, softmax and additions are not counted. Used to compare the
T2T-ViT builders with the MACs reported by Yuan et al., ICCV 2021
(https://arxiv.org/abs/2101.11986).
"""

import math
from collections.abc import Callable

import keras

from keras_attn._typing import Shape
from keras_attn.layers import (
    ClassToken,
    MultiHeadSelfAttention,
    PatchEmbedding,
    PositionEmbedding,
    SinCosPositionEmbedding1D,
    T2TModule,
    TokenPerformer,
    TokenTransformer,
    TransformerBlock,
)

MacCounter = Callable[[keras.layers.Layer, Shape], int]
"""A function `fn(layer, input_shape) -> int` counting one layer's MACs."""

_COUNTERS = {}


def register_macs(layer_cls: type[keras.layers.Layer]) -> Callable[[MacCounter], MacCounter]:
    """Decorator registering `fn(layer, input_shape) -> int` for a layer class."""

    def register(fn):
        _COUNTERS[layer_cls] = fn
        return fn

    return register


def count_macs(model: keras.Model, by_layer: bool = False) -> int | tuple[int, dict[str, int]]:
    """Counts the MACs of one forward pass of a functional model, batch 1.

    Every top-level layer with weights must have a registered counter
    (`register_macs`); layers without weights (soft splits, dropout,
    reshapes) cost nothing, and so do layer norms and the class token.

    Args:
        model: a built functional `keras.Model` with known input sizes.
        by_layer: bool, also return the count of each top-level layer.

    Returns:
        The total as an int, or `(total, {layer_name: macs})` with `by_layer`.

    Raises:
        ValueError: if a layer with weights has no counter.

    Example:

    >>> from keras_attn.models import build_vision_transformer
    >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=1)
    >>> count_macs(vit)
    183168
    """
    counts = {}
    for layer in model.layers:
        if isinstance(layer, keras.layers.InputLayer):
            continue
        counts[layer.name] = layer_macs(layer, tuple(layer.input.shape))
    total = sum(counts.values())
    return (total, counts) if by_layer else total


def layer_macs(layer: keras.layers.Layer, input_shape: Shape) -> int:
    """MACs of one layer called on `input_shape` (batch axis included)."""
    for layer_cls in type(layer).__mro__:
        if layer_cls in _COUNTERS:
            return _COUNTERS[layer_cls](layer, input_shape)
    if isinstance(layer, FREE_LAYERS) or not layer.weights:
        return 0
    raise ValueError(
        f"No MAC counter for layers of type {type(layer).__name__}; add one with "
        f"`register_macs`. Received: layer={layer.name!r}"
    )


def _positions(input_shape):
    """Number of vectors a last-axis product is applied to."""
    return math.prod(input_shape[1:-1])


@register_macs(keras.layers.Dense)
def _dense(layer, input_shape):
    return _positions(input_shape) * input_shape[-1] * layer.units


@register_macs(keras.layers.EinsumDense)
def _einsum_dense(layer, input_shape):
    kernel = layer.kernel.shape
    return _positions(input_shape) * math.prod(kernel)


@register_macs(PatchEmbedding)
def _patch_embedding(layer, input_shape):
    channels = input_shape[3] if len(input_shape) == 4 else 1
    rows, columns = layer.output_grid(input_shape[1], input_shape[2])
    return rows * columns * layer.patch_size**2 * channels * layer.hidden_dim


@register_macs(MultiHeadSelfAttention)
def _attention(layer, input_shape):
    length, dim = input_shape[1], input_shape[-1]
    projections = length * dim * layer.num_heads * (2 * layer.key_dim + layer.value_dim)
    output = length * math.prod(layer.output_dense.kernel.shape)
    if layer.is_sparse:
        keys = layer.attention_pattern.key_indices(length)[0].shape[1]
    else:
        keys = length
    products = layer.num_heads * length * keys * (layer.key_dim + layer.value_dim)
    return projections + output + products


@register_macs(TransformerBlock)
def _transformer_block(layer, input_shape):
    mlp = _positions(input_shape) * 2 * input_shape[-1] * layer.intermediate_dim
    return _attention(layer.attention, input_shape) + mlp


@register_macs(TokenTransformer)
def _token_transformer(layer, input_shape):
    output_shape = (*input_shape[:-1], layer.token_dim)
    mlp = _dense(layer.mlp_hidden, output_shape) + _dense(layer.mlp_output, output_shape)
    return _attention(layer.attention, input_shape) + mlp


@register_macs(TokenPerformer)
def _token_performer(layer, input_shape):
    length, token_dim, features = input_shape[1], layer.token_dim, layer.num_features
    output_shape = (*input_shape[:-1], token_dim)
    dense = _dense(layer.key_query_value, input_shape) + sum(
        _dense(d, output_shape) for d in (layer.projection, layer.mlp_hidden, layer.mlp_output)
    )
    random_features = 2 * length * token_dim * features  # w k and w q
    # phi(k)^T v, phi(q) (phi(k)^T v) and the normaliser phi(q) . sum phi(k).
    linear_attention = 2 * length * token_dim * features + length * features
    return dense + random_features + linear_attention


@register_macs(T2TModule)
def _t2t_module(layer, input_shape):
    channels = input_shape[3] if len(input_shape) == 4 else 1
    grids = layer.grids(*input_shape[1:3])
    sizes = [channels * layer.kernel_sizes[0] ** 2, layer.token_dim * layer.kernel_sizes[1] ** 2]
    total = 0
    for token_layer, grid, size in zip(layer.token_layers, grids[:2], sizes, strict=True):
        total += layer_macs(token_layer, (1, grid[0] * grid[1], size))
    last = grids[-1]
    projection_input = (1, last[0] * last[1], layer.token_dim * layer.kernel_sizes[2] ** 2)
    return total + _dense(layer.projection, projection_input)


# Layers with weights whose cost is element-wise, hence not counted.
FREE_LAYERS = (
    keras.layers.LayerNormalization,
    ClassToken,
    PositionEmbedding,
    SinCosPositionEmbedding1D,
)
