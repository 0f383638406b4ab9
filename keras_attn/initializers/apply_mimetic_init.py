"""Re-initialising the attention layers of a built model mimetically.

Paper: "Mimetic Initialization of Self-Attention Layers" (Trockman & Kolter,
ICML 2023), https://arxiv.org/abs/2305.09828.
"""

import keras
import numpy as np

from keras_attn.initializers.mimetic_initializer import MimeticInitializer
from keras_attn.pruning.attention_layers import attention_layers


def apply_mimetic_init(
    model_or_layer: keras.layers.Layer, initializer: MimeticInitializer | None = None
) -> list[keras.layers.Layer]:
    """Sets the attention kernels of a built model or layer mimetically.

    Each attention layer (`keras.layers.MultiHeadAttention`,
    `keras_attn.layers.MultiHeadSelfAttention` or a subclass) found inside
    `model_or_layer` gets layer index `i` (in the order of
    `keras_attn.pruning.attention_layers`), so
    independent `Z` matrices per head and per layer; its query, key, value
    and output kernels are set by `initializer.query(i)`, `.key(i)`,
    `.value(i)`, `.output(i)` and the four projection biases are set to
    zero, as in the paper. Everything else (MLPs, embeddings, norms, the
    gate of a gated `MultiHeadAttention`) is left untouched.

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
    layers = list(attention_layers(model_or_layer).values())
    if not layers:
        raise ValueError(
            "`model_or_layer` contains no MultiHeadAttention or MultiHeadSelfAttention "
            f"layer. Received: model_or_layer={model_or_layer.name!r}"
        )
    for index, layer in enumerate(layers):
        _initialize_layer(layer, initializer, index)
    return layers


def _initialize_layer(layer, initializer, index):
    if not layer.built:
        raise ValueError(
            f"Layer {layer.name!r} is not built: call the model on data (or build it) "
            f"first. Received: built={layer.built}"
        )
    denses = {
        "query": layer.query_dense,
        "key": layer.key_dense,
        "value": layer.value_dense,
        "output": layer.output_dense,
    }
    shapes = {role: tuple(dense.kernel.shape) for role, dense in denses.items()}
    _check_square_products(layer.name, shapes)
    for role, dense in denses.items():
        member = getattr(initializer, role)(index)
        dense.kernel.assign(member(shapes[role], dtype=dense.kernel.dtype))
        if dense.bias is not None:
            dense.bias.assign(np.zeros(dense.bias.shape, dense.bias.dtype))


def _check_square_products(name, shapes):
    if shapes["query"] != shapes["key"]:
        raise ValueError(
            f"Layer {name!r}: the query and key kernels must have the same shape for "
            f"W_q W_kᵀ to be square. Received: query={shapes['query']}, key={shapes['key']}"
        )
    value, output = shapes["value"], shapes["output"]
    if value[1:] != output[:2] or value[0] != output[2]:
        raise ValueError(
            f"Layer {name!r}: W_v W_o must be square (output size equal to the value "
            f"input size). Received: value={value}, output={output}"
        )
