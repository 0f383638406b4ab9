"""Tokens-to-Token ViT builders (Yuan et al., ICCV 2021).

Yuan et al., "Tokens-to-Token ViT: Training Vision Transformers from Scratch
on ImageNet", ICCV 2021 (https://arxiv.org/abs/2101.11986). A `T2TModule`
turns the image into tokens, then a class token, a frozen 1D sinusoidal
position table, pre-norm `TransformerBlock`s (no query/key/value bias, an
output-projection bias), a final layer norm and a linear head on the class
token, as in the official code.
"""

import keras

from keras_attn.layers import (
    ClassToken,
    SinCosPositionEmbedding1D,
    T2TModule,
    TransformerBlock,
)

T2T_VIT_VARIANTS = {
    "t2t_vit_7": {"embed_dim": 256, "depth": 7, "num_heads": 4, "mlp_ratio": 2.0},
    "t2t_vit_10": {"embed_dim": 256, "depth": 10, "num_heads": 4, "mlp_ratio": 2.0},
    "t2t_vit_12": {"embed_dim": 256, "depth": 12, "num_heads": 4, "mlp_ratio": 2.0},
    "t2t_vit_14": {"embed_dim": 384, "depth": 14, "num_heads": 6, "mlp_ratio": 3.0},
    "t2t_vit_19": {"embed_dim": 448, "depth": 19, "num_heads": 7, "mlp_ratio": 3.0},
    "t2t_vit_24": {"embed_dim": 512, "depth": 24, "num_heads": 8, "mlp_ratio": 3.0},
    "t2t_vit_t_14": {"embed_dim": 384, "depth": 14, "num_heads": 6, "mlp_ratio": 3.0},
    "t2t_vit_t_19": {"embed_dim": 448, "depth": 19, "num_heads": 7, "mlp_ratio": 3.0},
    "t2t_vit_t_24": {"embed_dim": 512, "depth": 24, "num_heads": 8, "mlp_ratio": 3.0},
}
"""Backbone of each paper variant; `t2t_vit_t_*` use transformer token layers."""

# Layer norms of the official code use PyTorch's default epsilon.
LAYER_NORM_EPSILON = 1e-5


def build_t2t_vit(
    image_shape=(224, 224, 3),
    num_classes=1000,
    variant="t2t_vit_7",
    embed_dim=None,
    depth=None,
    num_heads=None,
    mlp_ratio=None,
    token_layer=None,
    token_dim=64,
    kernel_sizes=(7, 3, 3),
    strides=(4, 2, 2),
    paddings=(2, 1, 1),
    dropout=0.0,
    seed=None,
    name=None,
):
    """Builds a T2T-ViT classifier as a functional Keras model.

    `variant` picks the backbone of a paper model (see `T2T_VIT_VARIANTS`);
    any of `embed_dim`, `depth`, `num_heads`, `mlp_ratio` and `token_layer`
    overrides it, which also allows custom sizes (`variant=None` then needs
    all four sizes). The soft-split settings default to the paper's (kernel
    7/3/3, stride 4/2/2, padding 2/1/1: 196 tokens at 224 pixels).

    Args:
        image_shape: `(height, width)` or `(height, width, channels)`.
        num_classes: int, size of the softmax output.
        variant: a key of `T2T_VIT_VARIANTS`, or `None`.
        embed_dim: int, token size of the backbone.
        depth: int, number of transformer blocks.
        num_heads: int, attention heads per block.
        mlp_ratio: float, MLP hidden size as a multiple of `embed_dim`.
        token_layer: `"performer"` or `"transformer"`. Defaults to
            `"transformer"` for the `t2t_vit_t_*` variants, else `"performer"`.
        token_dim: int, token size inside the T2T module.
        kernel_sizes: three ints, windows of the soft splits.
        strides: three ints, steps of the soft splits.
        paddings: three ints, zero padding of the soft splits.
        dropout: float, dropout in the blocks.
        seed: int, seed of the Performer random features.
        name: model name, the variant by default.

    Returns:
        A `keras.Model` from images to class probabilities, with the layers
        `tokens_to_token`, `class_token`, `position_embedding`, `block_0`,
        `block_1`, ..., `final_norm` and `head`.

    Example:

    >>> model = build_t2t_vit((28, 28), 10, variant=None, embed_dim=32, depth=2,
    ...     num_heads=2, mlp_ratio=2.0, token_dim=16, kernel_sizes=(3, 3, 3),
    ...     strides=(2, 2, 1), paddings=(1, 1, 1))
    >>> model(np.zeros((2, 28, 28))).shape
    (2, 10)
    """
    sizes = _resolve_sizes(variant, embed_dim, depth, num_heads, mlp_ratio, token_layer)
    if not isinstance(num_classes, int) or num_classes < 1:
        raise ValueError(
            f"`num_classes` must be a positive integer. Received: num_classes={num_classes!r}"
        )
    images = keras.Input(shape=tuple(image_shape), name="images")
    x = T2TModule(
        sizes["embed_dim"],
        token_layer=sizes["token_layer"],
        token_dim=token_dim,
        kernel_sizes=kernel_sizes,
        strides=strides,
        paddings=paddings,
        seed=seed,
        name="tokens_to_token",
    )(images)  # (batch, tokens, embed_dim)
    x = ClassToken(keras.initializers.TruncatedNormal(stddev=0.02), name="class_token")(x)
    x = SinCosPositionEmbedding1D(name="position_embedding")(x)  # (batch, 1 + tokens, embed_dim)
    for index in range(sizes["depth"]):
        x = TransformerBlock(
            sizes["num_heads"],
            int(sizes["embed_dim"] * sizes["mlp_ratio"]),
            dropout=dropout,
            layer_norm_epsilon=LAYER_NORM_EPSILON,
            attention_kwargs={"use_bias": False, "output_use_bias": True},
            name=f"block_{index}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="final_norm")(x)
    logits = keras.layers.Dense(num_classes, name="head")(x[:, 0])  # (batch, classes)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(images, outputs, name=name or variant or "t2t_vit")


def _resolve_sizes(variant, embed_dim, depth, num_heads, mlp_ratio, token_layer):
    if variant is not None and variant not in T2T_VIT_VARIANTS:
        raise ValueError(
            f"`variant` must be one of {sorted(T2T_VIT_VARIANTS)} or None. "
            f"Received: variant={variant!r}"
        )
    given = {"embed_dim": embed_dim, "depth": depth, "num_heads": num_heads, "mlp_ratio": mlp_ratio}
    sizes = dict(T2T_VIT_VARIANTS.get(variant, {}))
    sizes.update({key: value for key, value in given.items() if value is not None})
    for key in ("embed_dim", "depth", "num_heads"):
        value = sizes.get(key)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ValueError(f"`{key}` must be a positive integer. Received: {key}={value!r}")
    if not sizes.get("mlp_ratio", 0) > 0:
        raise ValueError(f"`mlp_ratio` must be positive. Received: mlp_ratio={mlp_ratio!r}")
    default_layer = "transformer" if (variant or "").startswith("t2t_vit_t_") else "performer"
    sizes["token_layer"] = token_layer or default_layer
    return sizes
