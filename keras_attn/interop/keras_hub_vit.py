"""Give a KerasHub ViT keras_attn's ViT layers, with its weights carried over.

`convert_keras_hub_vit` rebuilds a model that holds KerasHub's `ViTBackbone`
(the backbone itself, a `ViTImageClassifier`, or a user's functional model
around one) with the backbone's layers written out in the model's own
graph as keras_attn layers: `PatchEmbedding`, `ClassToken` and
`PositionEmbedding` for its `ViTPatchingAndEmbedding`, and one pre-norm
`TransformerBlock` per block of its `ViTEncoder`. The copy computes what
the model computes, and the library's tools that take a ViT of
`TransformerBlock`s, such as `AdaViT`, take it.
"""

import keras
from keras import ops

from keras_attn.interop.attention_conversion import (
    assign_copy,
    from_keras_attention,
    rebuilt_layer,
)
from keras_attn.interop.model_layers import is_graph_model
from keras_attn.layers import ClassToken, PatchEmbedding, PositionEmbedding, TransformerBlock

# KerasHub's ViT layers that the copy writes out as keras_attn layers.
VIT_LAYERS = ("ViTPatchingAndEmbedding", "ViTEncoder")


def convert_keras_hub_vit(model: keras.Model) -> keras.Model:
    """A copy of `model` with its KerasHub ViT layers as keras_attn's.

    Every other layer is copied with its weights. The `ViTBackbone` in
    `model` (or `model` itself) is not kept as a nested model: its layers
    run in the copy's own graph, so that `copy.layers` lists the new ones:

    - the patching and embedding layer becomes a `PatchEmbedding` (its
      convolution), a `ClassToken` and a `PositionEmbedding`, named after
      it (`"vit_patching_and_embedding_patches"`, `..._class_token`,
      `..._positions`);
    - the encoder becomes its input `Dropout`, one pre-norm
      `TransformerBlock` per encoder block (its attention converted by
      `from_keras_attention`), named after the encoder and the block
      (`"vit_encoder_transformer_block_1"`, ...), and its final
      `LayerNormalization` (`"vit_encoder_norm"`).

    The copy gives the outputs of `model`, trains, and saves to `.keras`;
    `model` itself is not changed. `AdaViT(copy)` wraps it (for a
    classifier, the readout is the copy's pooling and head).

    Args:
        model: a functional Keras model that holds a KerasHub `ViTBackbone`
            or its layers: a `ViTBackbone`, a `ViTImageClassifier`, or a
            model of your own around one. The backbone must read
            channels-last images in square patches, with a class token and
            the biases of its patch embedding and MLPs (KerasHub's defaults).

    Returns:
        The converted `keras.Model`.

    Raises:
        ValueError: if `model` is not a functional model, holds no KerasHub
            ViT layers, or its backbone sets an option that keras_attn's
            layers do not compute (see `model`); the message names the
            option and the value received.

    Example:

    >>> import keras_hub
    >>> backbone = keras_hub.models.ViTBackbone(
    ...     image_shape=(8, 8, 3), patch_size=4, num_layers=2, num_heads=2,
    ...     hidden_dim=8, mlp_dim=16,
    ... )
    >>> classifier = keras_hub.models.ViTImageClassifier(backbone, num_classes=3)
    >>> vit = convert_keras_hub_vit(classifier)
    >>> [layer.name for layer in vit.layers if isinstance(layer, TransformerBlock)]
    ['vit_encoder_transformer_block_1', 'vit_encoder_transformer_block_2']
    >>> AdaViT(vit, target_usage=0.5)(np.zeros((1, 8, 8, 3))).shape
    (1, 3)
    """
    if not isinstance(model, keras.Model) or not is_graph_model(model):
        raise ValueError(f"`model` must be a functional Keras model. Received: model={model!r}")
    if isinstance(model, keras.Sequential) or not _holds_vit(model):
        raise ValueError(
            "`model` must be a functional model that holds KerasHub's `ViTPatchingAndEmbedding` "
            f"and `ViTEncoder` (a `ViTBackbone`). Received: model={model.name!r}"
        )
    _check_vit_layers(model)
    copies = []
    converted = _converted(model, None, copies)
    for layer, copy in copies:
        copy.set_weights(layer.get_weights())
    return converted


def _converted(model, input_tensors, copies):
    """`model` cloned with its ViT layers written out; `copies` collects the layers to fill."""

    def clone(layer):
        if _is_vit_layer(layer) or _holds_vit(layer):
            return layer  # written out by `call` below
        copy = rebuilt_layer(layer)
        if getattr(layer, "weights", None):
            copies.append((layer, copy))
        return copy

    def call(layer, *args, **kwargs):
        if type(layer).__name__ == "ViTPatchingAndEmbedding":
            return _embedded_patches(layer, *args)
        if type(layer).__name__ == "ViTEncoder":
            return _encoded(layer, *args)
        if _holds_vit(layer):  # a nested backbone: its layers go into this graph
            return _converted(layer, args[0], copies).output
        return layer(*args, **kwargs)

    return keras.models.clone_model(
        model, input_tensors=input_tensors, clone_function=clone, call_function=call
    )


def _embedded_patches(layer, images):
    """The tokens `(batch, 1 + patches, dim)` of `layer` from `images`, by keras_attn layers."""
    options = {"dtype": layer.dtype_policy}
    patches = PatchEmbedding(
        layer.patch_size[0], layer.hidden_dim, name=f"{layer.name}_patches", **options
    )
    class_token = ClassToken(name=f"{layer.name}_class_token", **options)
    positions = PositionEmbedding(layer.num_positions, name=f"{layer.name}_positions", **options)
    x = patches(images)  # (batch, patches, dim)
    x = positions(class_token(x))  # (batch, 1 + patches, dim)
    patches.projection.set_weights(layer.patch_embedding.get_weights())
    class_token.token.assign(ops.reshape(layer.class_token, (-1,)))  # (1, 1, dim) -> (dim,)
    assign_copy(positions.embeddings, layer.position_embedding.embeddings)  # (1 + patches, dim)
    return x


def _encoded(encoder, tokens):
    """`encoder`'s output `(batch, length, dim)` for `tokens`, by keras_attn layers."""
    options = {"dtype": encoder.dtype_policy}
    x = keras.layers.Dropout(encoder.dropout_rate, name=f"{encoder.name}_dropout", **options)(
        tokens
    )
    for block in encoder.encoder_layers:
        converted = TransformerBlock(
            intermediate_dim=block.mlp_dim,
            dropout=block.dropout_rate,
            layer_norm_epsilon=block.layer_norm_epsilon,
            attention=from_keras_attention(block.mha),
            name=f"{encoder.name}_{block.name}",
            **options,
        )
        x = converted(x)  # (batch, length, dim)
        pairs = {
            converted.attention_norm: block.layer_norm_1,
            converted.mlp_norm: block.layer_norm_2,
            converted.mlp_hidden: block.mlp.dense_1,
            converted.mlp_output: block.mlp.dense_2,
        }
        for target, source in pairs.items():
            target.set_weights(source.get_weights())
    norm = keras.layers.LayerNormalization(
        epsilon=encoder.layer_norm_epsilon, name=f"{encoder.name}_norm", **options
    )
    x = norm(x)  # (batch, length, dim)
    norm.set_weights(encoder.layer_norm.get_weights())
    return x


def _check_vit_layers(model):
    """Refuses the options of KerasHub's ViT that keras_attn's layers do not compute."""
    for layer in _vit_layers(model):
        if type(layer).__name__ == "ViTPatchingAndEmbedding":
            height, width = layer.patch_size
            options = {  # name: (value, supported, what keras_attn's layers need)
                "data_format": (
                    layer.data_format,
                    layer.data_format == "channels_last",
                    "channels-last images",
                ),
                "patch_size": (tuple(layer.patch_size), height == width, "square patches"),
                "use_class_token": (layer.use_class_token, layer.use_class_token, "a class token"),
                "use_patch_bias": (
                    layer.use_patch_bias,
                    layer.use_patch_bias,
                    "the bias of the patch embedding",
                ),
            }
        else:
            options = {
                "use_mlp_bias": (layer.use_mlp_bias, layer.use_mlp_bias, "the biases of the MLPs")
            }
        for name, (value, supported, needed) in options.items():
            if not supported:
                raise ValueError(
                    f"KerasHub ViT layer {layer.name!r} cannot be converted: keras_attn's ViT "
                    f"layers need {needed}. Received: {name}={value!r}"
                )


def _is_vit_layer(layer):
    return type(layer).__name__ in VIT_LAYERS and type(layer).__module__.startswith("keras_hub")


def _vit_layers(model):
    """KerasHub's ViT layers in `model`, at any depth of nested functional models."""
    found = []
    for layer in model.layers:
        if _is_vit_layer(layer):
            found.append(layer)
        elif isinstance(layer, keras.Model) and is_graph_model(layer):
            found += _vit_layers(layer)
    return found


def _holds_vit(layer):
    return isinstance(layer, keras.Model) and is_graph_model(layer) and bool(_vit_layers(layer))
