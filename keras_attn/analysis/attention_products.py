"""Attention weight products that mimetic initialization imitates, and their statistics.

Paper: "Mimetic Initialization of Self-Attention Layers" (Trockman & Kolter,
ICML 2023), https://arxiv.org/abs/2305.09828. In pretrained transformers,
`W_q W_kᵀ` of a head tends to have a positive diagonal and `W_v W_o` a
negative one; these functions measure that on any kernels in the Keras
layout (query/key/value `(d, heads, head_dim)`, output `(heads, head_dim, d)`).
"""

from collections.abc import Mapping, Sequence

import numpy as np

from keras_attn._typing import Tensor


def query_key_products(query: Tensor, key: Tensor) -> np.ndarray:
    """`W_q^h W_k^hᵀ` of every head.

    Args:
        query: `(d, heads, head_dim)` query kernel.
        key: `(d, heads, head_dim)` key kernel.

    Returns:
        numpy array `(heads, d, d)`.
    """
    return np.einsum("dhk,ehk->hde", np.asarray(query), np.asarray(key))  # (heads, d, d)


def value_output_products(value: Tensor, output: Tensor, per_head: bool = False) -> np.ndarray:
    """`W_v W_o` of the layer, or `W_v^h W_o^h` of every head.

    Args:
        value: `(d, heads, head_dim)` value kernel.
        output: `(heads, head_dim, d)` output kernel.
        per_head: bool, return one product per head instead of their sum.

    Returns:
        numpy array `(d, d)`, or `(heads, d, d)` with `per_head=True`.
    """
    value, output = np.asarray(value), np.asarray(output)
    if per_head:
        return np.einsum("dhk,hke->hde", value, output)  # (heads, d, d)
    return np.einsum("dhk,hke->de", value, output)  # (d, d)


def diagonal_statistics(matrices: Tensor) -> dict[str, np.ndarray]:
    """Diagonal versus off-diagonal statistics of square matrices.

    Args:
        matrices: array `(..., d, d)`.

    Returns:
        dict of arrays of shape `(...)`: `mean_diagonal`, `offdiagonal_mean`,
        `offdiagonal_std`, and `diagonal_score`, the mean diagonal in units
        of the off-diagonal standard deviation (scale free: about
        `beta·sqrt(d)/alpha` for `alpha·Z + beta·I`, positive for the
        query/key pattern, negative for the value/output one).
    """
    matrices = np.asarray(matrices, dtype=np.float64)
    dim = matrices.shape[-1]
    diagonal = np.diagonal(matrices, axis1=-2, axis2=-1)  # (..., d)
    off_diagonal = ~np.eye(dim, dtype=bool)
    entries = matrices[..., off_diagonal]  # (..., d * (d - 1))
    mean_diagonal = diagonal.mean(-1)
    offdiagonal_std = entries.std(-1)
    return {
        "mean_diagonal": mean_diagonal,
        "offdiagonal_mean": entries.mean(-1),
        "offdiagonal_std": offdiagonal_std,
        "diagonal_score": mean_diagonal / offdiagonal_std,
    }


def attention_diagonal_statistics(
    layer_kernels: Sequence[Mapping[str, Tensor]],
) -> dict[str, dict[str, list]]:
    """The diagonal statistics of `W_q W_kᵀ` and `W_v W_o` of every layer and head.

    Args:
        layer_kernels: list, one entry per layer, of dicts with the
            `"query"`, `"key"`, `"value"` and `"output"` kernels in the Keras
            layout (for example `keras_attn.pretrained.MiniLMWeights.attention_kernels`
            of each layer).

    Returns:
        dict with `"query_key_per_head"`, `"value_output_per_layer"` and
        `"value_output_per_head"`, each a dict of the `diagonal_statistics`
        names to nested lists `(layers, heads)` (or `(layers,)` per layer).

    Example:

    >>> eye = np.eye(4).reshape(4, 2, 2)  # (d, heads, head_dim)
    >>> kernels = {"query": eye, "key": eye, "value": eye, "output": -eye.reshape(2, 2, 4)}
    >>> stats = attention_diagonal_statistics([kernels])
    >>> per_layer = stats["value_output_per_layer"]
    >>> per_layer.get("mean_diagonal") == [-1.0]
    True
    """
    per_head_query_key, per_layer_value_output, per_head_value_output = [], [], []
    for kernels in layer_kernels:
        query_key = query_key_products(kernels["query"], kernels["key"])  # (heads, d, d)
        per_head_query_key.append(diagonal_statistics(query_key))
        value, output = kernels["value"], kernels["output"]
        per_layer_value_output.append(diagonal_statistics(value_output_products(value, output)))
        per_head = value_output_products(value, output, per_head=True)  # (heads, d, d)
        per_head_value_output.append(diagonal_statistics(per_head))
    return {
        "query_key_per_head": _stack(per_head_query_key),
        "value_output_per_layer": _stack(per_layer_value_output),
        "value_output_per_head": _stack(per_head_value_output),
    }


def _stack(statistics):
    """List (per layer) of dicts of arrays -> dict of nested lists."""
    return {name: np.array([s[name] for s in statistics]).tolist() for name in statistics[0]}
