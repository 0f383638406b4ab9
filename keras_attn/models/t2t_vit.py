"""Tokens-to-Token ViT builders (Yuan et al., ICCV 2021).

Yuan et al., "Tokens-to-Token ViT: Training Vision Transformers from Scratch
on ImageNet", ICCV 2021 (https://arxiv.org/abs/2101.11986). A `T2TModule`
turns the image into tokens, then a class token, a frozen 1D sinusoidal
position table, pre-norm `TransformerBlock`s (no query/key/value bias, an
output-projection bias), a final layer norm and a linear head on the class
token, as in the official code. With `tokenizer="patches"` a linear patch
embedding takes the place of the T2T module and everything else stays the
same: the paper's "without T2T module" ablation.
"""

import math
from collections.abc import Sequence

import keras

from keras_attn.layers import (
    ClassToken,
    PatchEmbedding,
    SinCosPositionEmbedding1D,
    T2TModule,
    TransformerBlock,
)
from keras_attn.models.variants import drop_path_rates, variant_sizes
from keras_attn.utils.validation import check_choice, check_heads, check_image_shape, check_int


def _variant(hidden_dim, num_layers, num_heads, intermediate_dim, token_layer):
    return {
        "hidden_dim": hidden_dim,
        "num_layers": num_layers,
        "num_heads": num_heads,
        "intermediate_dim": intermediate_dim,
        "token_layer": token_layer,
    }


T2T_VIT_VARIANTS = {
    "t2t_vit_7": _variant(256, 7, 4, 512, "performer"),
    "t2t_vit_10": _variant(256, 10, 4, 512, "performer"),
    "t2t_vit_12": _variant(256, 12, 4, 512, "performer"),
    "t2t_vit_14": _variant(384, 14, 6, 1152, "performer"),
    "t2t_vit_19": _variant(448, 19, 7, 1344, "performer"),
    "t2t_vit_24": _variant(512, 24, 8, 1536, "performer"),
    "t2t_vit_t_14": _variant(384, 14, 6, 1152, "transformer"),
    "t2t_vit_t_19": _variant(448, 19, 7, 1344, "transformer"),
    "t2t_vit_t_24": _variant(512, 24, 8, 1536, "transformer"),
}
"""Backbone sizes (hidden, MLP) and T2T token layer of each paper variant (Yuan et al., Table 1)."""

# Layer norms of the official code use PyTorch's default epsilon.
LAYER_NORM_EPSILON = 1e-5
TOKENIZERS = ("t2t", "patches")


def build_t2t_vit(
    image_shape: Sequence[int] = (224, 224, 3),
    num_classes: int = 1000,
    variant: str | None = "t2t_vit_7",
    hidden_dim: int | None = None,
    num_layers: int | None = None,
    num_heads: int | None = None,
    intermediate_dim: int | None = None,
    token_layer: str | None = None,
    token_dim: int = 64,
    kernel_sizes: Sequence[int] = (7, 3, 3),
    strides: Sequence[int] = (4, 2, 2),
    paddings: Sequence[int] = (2, 1, 1),
    dropout: float = 0.0,
    seed: int | None = None,
    name: str | None = None,
    drop_path_rate: float = 0.0,
    qk_scale: float | None = None,
    tokenizer: str = "t2t",
    patch_size: int | None = None,
) -> keras.Model:
    """Builds a T2T-ViT classifier as a functional Keras model.

    `variant` picks the backbone of a paper model (see `T2T_VIT_VARIANTS`);
    any of `hidden_dim`, `num_layers`, `num_heads`, `intermediate_dim` and
    `token_layer` overrides it, which also allows custom sizes
    (`variant=None` then needs all four sizes). The soft-split settings
    default to the paper's (kernel 7/3/3, stride 4/2/2, padding 2/1/1: 196
    tokens at 224 pixels).

    `tokenizer="patches"` replaces the T2T module by a `PatchEmbedding`
    (non-overlapping `patch_size` patches, one linear projection) and keeps
    the rest of the model identical: the class token, the frozen 1D
    sinusoidal positions, the blocks and the head. With the default
    `patch_size`, the product of the soft-split strides, both tokenizers
    give the same number of tokens whenever each soft split keeps
    `size / stride` positions (the paper's settings: 196 tokens, 16x16
    patches, at 224 pixels).

    Args:
        image_shape: `(height, width)` or `(height, width, channels)`.
        num_classes: int, size of the softmax output.
        variant: a key of `T2T_VIT_VARIANTS`, or `None`.
        hidden_dim: int, token size of the backbone (its width).
        num_layers: int, number of transformer blocks.
        num_heads: int, attention heads per block.
        intermediate_dim: int, hidden size of the blocks' MLPs (the
            paper's "MLP size").
        token_layer: `"performer"` or `"transformer"`, the token layers of
            the T2T module. Defaults to the variant's (`"transformer"` for
            the `t2t_vit_t_*` variants), `"performer"` without a variant.
        token_dim: int, token size inside the T2T module.
        kernel_sizes: three ints, windows of the soft splits.
        strides: three ints, steps of the soft splits.
        paddings: three ints, zero padding of the soft splits.
        dropout: float, dropout in the blocks.
        seed: int, seed of the Performer random features; block `i` seeds
            its drop path with `seed + 2 + i`.
        name: model name, the variant by default.
        drop_path_rate: float in `[0, 1)`, stochastic depth of the last
            block, rising linearly from 0 in the first (the official code's
            schedule; its ImageNet training uses 0.1).
        qk_scale: `None` or a positive float, the attention scale of the
            blocks (see `MultiHeadSelfAttention`). `None` gives
            `1 / sqrt(head size)`; the official pretrained T2T-ViT-7 uses
            `256 ** -0.5`.
        tokenizer: `"t2t"` (the T2T module) or `"patches"` (a linear patch
            embedding; the soft-split and token-layer arguments are then
            unused).
        patch_size: int, side of the patches of `tokenizer="patches"`.
            Defaults to the product of `strides`.

    Returns:
        A `keras.Model` from images to class probabilities, with the layers
        `tokens_to_token` (or `patch_embedding`), `class_token`,
        `position_embedding`, `block_0`, `block_1`, ..., `final_norm` and
        `head`.

    Example:

    >>> model = build_t2t_vit((28, 28), 10, variant=None, hidden_dim=32, num_layers=2,
    ...     num_heads=2, intermediate_dim=64, token_dim=16, kernel_sizes=(3, 3, 3),
    ...     strides=(2, 2, 1), paddings=(1, 1, 1))
    >>> model(np.zeros((2, 28, 28))).shape
    (2, 10)
    >>> patches = build_t2t_vit((28, 28), 10, variant=None, hidden_dim=32, num_layers=2,
    ...     num_heads=2, intermediate_dim=64, tokenizer="patches", patch_size=4)
    >>> patches.get_layer("position_embedding").output.shape
    (None, 50, 32)
    """
    sizes = _resolve_sizes(
        variant, hidden_dim, num_layers, num_heads, intermediate_dim, token_layer
    )
    num_classes = check_int("num_classes", num_classes)
    images = keras.Input(shape=check_image_shape(image_shape), name="images")
    tokens = _tokenizer(
        tokenizer, patch_size, sizes, token_dim, kernel_sizes, strides, paddings, seed
    )
    x = tokens(images)  # (batch, tokens, hidden_dim)
    x = ClassToken(keras.initializers.TruncatedNormal(stddev=0.02), name="class_token")(x)
    x = SinCosPositionEmbedding1D(name="position_embedding")(x)  # (batch, 1 + tokens, hidden_dim)
    attention_kwargs = {"use_bias": False, "output_use_bias": True}
    if qk_scale is not None:
        attention_kwargs["qk_scale"] = qk_scale  # validated by the attention core
    for index, rate in enumerate(drop_path_rates(drop_path_rate, sizes["num_layers"])):
        x = TransformerBlock(
            sizes["num_heads"],
            sizes["intermediate_dim"],
            dropout=dropout,
            layer_norm_epsilon=LAYER_NORM_EPSILON,
            attention_kwargs=attention_kwargs,
            drop_path_rate=rate,
            seed=None if seed is None else seed + 2 + index,
            name=f"block_{index}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=LAYER_NORM_EPSILON, name="final_norm")(x)
    logits = keras.layers.Dense(num_classes, name="head")(x[:, 0])  # (batch, classes)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(images, outputs, name=name or variant or "t2t_vit")


def _tokenizer(tokenizer, patch_size, sizes, token_dim, kernel_sizes, strides, paddings, seed):
    """The `tokens_to_token` module or, for `"patches"`, the `patch_embedding` layer."""
    check_choice("tokenizer", tokenizer, TOKENIZERS)
    if tokenizer == "patches":
        patch_size = math.prod(strides) if patch_size is None else patch_size
        return PatchEmbedding(
            check_int("patch_size", patch_size), sizes["hidden_dim"], name="patch_embedding"
        )
    if patch_size is not None:
        raise ValueError(
            "`patch_size` applies to `tokenizer='patches'` only. "
            f"Received: patch_size={patch_size!r} with tokenizer='t2t'"
        )
    return T2TModule(
        sizes["hidden_dim"],
        token_layer=sizes["token_layer"],
        token_dim=token_dim,
        kernel_sizes=kernel_sizes,
        strides=strides,
        paddings=paddings,
        seed=seed,
        name="tokens_to_token",
    )


def _resolve_sizes(variant, hidden_dim, num_layers, num_heads, intermediate_dim, token_layer):
    sizes = variant_sizes(
        T2T_VIT_VARIANTS,
        variant,
        hidden_dim=hidden_dim,
        num_layers=num_layers,
        num_heads=num_heads,
        intermediate_dim=intermediate_dim,
        token_layer=token_layer,
    )
    for key in ("num_layers", "intermediate_dim"):
        sizes[key] = check_int(key, sizes.get(key))
    sizes["hidden_dim"], sizes["num_heads"] = check_heads(
        sizes.get("hidden_dim"), sizes.get("num_heads")
    )
    sizes.setdefault("token_layer", "performer")
    return sizes
