"""Re-initialising the attention layers of a built model mimetically.

Paper: "Mimetic Initialization of Self-Attention Layers" (Trockman & Kolter,
ICML 2023), https://arxiv.org/abs/2305.09828.
"""

import keras
import numpy as np

from keras_attn.initializers.mimetic_initializer import MimeticInitializer
from keras_attn.utils.model_layers import attention_projections, find_attention_layers


def apply_mimetic_init(
    model_or_layer: keras.layers.Layer, initializer: MimeticInitializer | None = None
) -> list[keras.layers.Layer]:
    """Sets the attention kernels of a built model or layer mimetically.

    Each attention layer found inside `model_or_layer` by
    `keras_attn.utils.find_attention_layers` (`keras.layers.MultiHeadAttention`,
    `keras_attn.layers.MultiHeadSelfAttention` or a subclass, KerasHub's
    `CachedMultiHeadAttention` included, at any depth) gets layer index `i`
    in model order, so independent `Z` matrices per head and per layer; its
    query, key, value and output kernels are set by `initializer.query(i)`,
    `.key(i)`, `.value(i)`, `.output(i)` and the four projection biases are
    set to zero, as in the paper. Everything else (MLPs, embeddings, norms,
    the gate of a gated `MultiHeadAttention`) is left untouched.

    A convolutional query and key (`ConvolutionalSelfAttention` or
    `LogSparseAttention` with `kernel_size=k > 1`, kernels
    `(k, dim, heads, head_dim)`) get the mimetic kernels on the tap of the
    current position (tap `k - 1`) and zeros on the `k - 1` earlier taps. The
    mimetic structure `W_q W_kᵀ ≈ α·Z + β·I` is a statement about one
    token's query and key; a nonzero earlier tap would add products of
    neighbouring tokens, for which the paper gives no target. With zeros
    there, the layer starts as the position-wise attention with the mimetic
    kernels (the `kernel_size=1` layer), and the earlier taps still get
    gradients, so training grows the local context from there.

    All or nothing: every layer is checked before any weight changes, and a
    layer that cannot be handled raises a `ValueError` naming it, leaving
    the model as it was.

    Args:
        model_or_layer: a built `keras.Model` or `keras.layers.Layer`.
        initializer: a `MimeticInitializer`. Defaults to
            `MimeticInitializer()` (paper defaults, a fresh random seed).

    Returns:
        The list of attention layers that were re-initialised, in layer
        index order.

    Raises:
        ValueError: if there is no attention layer, a layer is not built, or
            a layer's kernels cannot form the square products (cross
            attention with different query and key sizes, or an output size
            different from the value input size).

    Example:

    ```python
    from keras_attn.initializers import MimeticInitializer, apply_mimetic_init
    from keras_attn.models import build_vision_transformer

    model = build_vision_transformer((28, 28), 10, patch_size=7, num_layers=4)
    layers = apply_mimetic_init(model, MimeticInitializer(seed=0))
    len(layers)  # 4
    ```

    References:
        - [Trockman & Kolter, 2023](https://arxiv.org/abs/2305.09828)
    """
    if initializer is None:
        initializer = MimeticInitializer()
    if not isinstance(initializer, MimeticInitializer):
        raise ValueError(
            f"`initializer` must be a `MimeticInitializer`. Received: initializer={initializer!r}"
        )
    layers = find_attention_layers(model_or_layer)
    if not layers:
        raise ValueError(
            "`model_or_layer` contains no MultiHeadAttention or MultiHeadSelfAttention "
            f"layer. Received: model_or_layer={model_or_layer.name!r}"
        )
    # Every kernel is computed before the first is assigned: all or nothing.
    plans = [
        _layer_kernels(path, layer, initializer, index)
        for index, (path, layer) in enumerate(layers.items())
    ]
    for plan in plans:
        for dense, kernel in plan:
            dense.kernel.assign(kernel)
            if dense.bias is not None:
                dense.bias.assign(np.zeros(dense.bias.shape, dense.bias.dtype))
    return list(layers.values())


def _layer_kernels(path, layer, initializer, index):
    """`[(projection, new kernel)]` of one attention layer, checked and computed."""
    if not layer.built:
        raise ValueError(
            f"Layer {path!r} is not built: call the model on data (or build it) "
            f"first. Received: built={layer.built}"
        )
    denses = attention_projections(layer)
    shapes = {role: tuple(dense.kernel.shape) for role, dense in denses.items()}
    _check_shapes(path, shapes)
    kernels = []
    for role, dense in denses.items():
        shape = shapes[role]
        member = getattr(initializer, role)(index)
        kernel = keras.ops.convert_to_numpy(member(shape[-3:], dtype=dense.kernel.dtype))
        if len(shape) == 4:  # (taps, dim, heads, head_dim): only the current position's tap
            kernel = np.concatenate([np.zeros((shape[0] - 1, *shape[1:]), kernel.dtype), [kernel]])
        kernels.append((dense, kernel))
    return kernels


def _check_shapes(path, shapes):
    query, key, value, output = (shapes[role] for role in ("query", "key", "value", "output"))
    if len(query) not in (3, 4) or len(value) != 3 or len(output) != 3:
        raise ValueError(
            f"Layer {path!r}: the kernels must be `([kernel_size,] dim, heads, head_dim)` for "
            "the query and key, `(dim, heads, head_dim)` for the value and "
            f"`(heads, head_dim, dim)` for the output. Received: query={query}, key={key}, "
            f"value={value}, output={output}"
        )
    if query != key:
        raise ValueError(
            f"Layer {path!r}: the query and key kernels must have the same shape for "
            f"W_q W_kᵀ to be square. Received: query={query}, key={key}"
        )
    if value[1:] != output[:2] or value[0] != output[2]:
        raise ValueError(
            f"Layer {path!r}: W_v W_o must be square (output size equal to the value "
            f"input size). Received: value={value}, output={output}"
        )
