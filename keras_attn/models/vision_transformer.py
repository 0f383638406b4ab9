"""A Vision Transformer builder (Dosovitskiy et al., 2021).

Patch embedding, learned or fixed 2D sine-cosine positions, a class token,
pre-norm `TransformerBlock`s on the library's attention core and a linear
head on the class token, in the standard sizes of `VIT_VARIANTS` or any
other. Later models (AdaViT, T2T-ViT) reuse its pieces.
"""

from collections.abc import Sequence

import keras

from keras_attn.layers import (
    ClassToken,
    PatchEmbedding,
    PositionEmbedding,
    SinCosPositionEmbedding2D,
    TransformerBlock,
)
from keras_attn.models.variants import drop_path_rates, variant_sizes
from keras_attn.utils.validation import check_heads, check_image_shape, check_int

POSITION_EMBEDDINGS = ("learned", "sincos")
VIT_VARIANTS = {
    "vit_tiny": {"hidden_dim": 192, "num_layers": 12, "num_heads": 3, "intermediate_dim": 768},
    "vit_small": {"hidden_dim": 384, "num_layers": 12, "num_heads": 6, "intermediate_dim": 1536},
    "vit_base": {"hidden_dim": 768, "num_layers": 12, "num_heads": 12, "intermediate_dim": 3072},
}
"""Sizes of the standard models ViT-Ti, ViT-S and ViT-B (Dosovitskiy et al.; Touvron et al.)."""
# The sizes of `variant=None`: a small ViT for images of about 32 pixels,
# whose MLP is twice its width (`intermediate_dim` defaults to `2 * hidden_dim`).
DEFAULT_SIZES = {"hidden_dim": 64, "num_layers": 4, "num_heads": 4}


def build_vision_transformer(
    image_shape: Sequence[int],
    num_classes: int,
    variant: str | None = None,
    patch_size: int = 4,
    hidden_dim: int | None = None,
    num_layers: int | None = None,
    num_heads: int | None = None,
    intermediate_dim: int | None = None,
    dropout: float = 0.0,
    position_embedding: str = "learned",
    drop_path_rate: float = 0.0,
    name: str = "vision_transformer",
) -> keras.Model:
    """Builds a ViT classifier as a functional Keras model.

    `variant` picks the sizes of a standard model (see `VIT_VARIANTS`:
    `"vit_tiny"`, `"vit_small"`, `"vit_base"`); any of `hidden_dim`,
    `num_layers`, `num_heads` and `intermediate_dim` overrides them. Without
    a variant the sizes default to a small ViT (`hidden_dim=64`,
    `num_layers=4`, `num_heads=4`, `intermediate_dim=2 * hidden_dim`). The
    patch size is not part of a variant: ViT-S/16 is `variant="vit_small",
    patch_size=16`.

    Args:
        image_shape: `(height, width)` or `(height, width, channels)`.
        num_classes: int, size of the softmax output.
        variant: a key of `VIT_VARIANTS`, or `None`.
        patch_size: int, side of the square patches.
        hidden_dim: int, token size (the model width), a multiple of `num_heads`.
        num_layers: int, number of transformer blocks.
        num_heads: int, attention heads per block.
        intermediate_dim: int, hidden size of the blocks' MLPs. Defaults to
            the variant's (four times its `hidden_dim`), or to
            `2 * hidden_dim` without a variant.
        dropout: float, dropout in the blocks.
        position_embedding: `"learned"` or `"sincos"` (fixed 2D).
        drop_path_rate: float in `[0, 1)`, stochastic depth of the last
            block; the rates rise linearly from 0 in the first block (see
            `drop_path_rates`).
        name: model name.

    Returns:
        A `keras.Model` from images to class probabilities. Its blocks are
        the layers named `block_0`, `block_1`, ...

    Example:

    >>> model = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=2)
    >>> model(np.zeros((2, 28, 28))).shape
    (2, 10)
    >>> vit_ti16 = build_vision_transformer((224, 224, 3), 1000, "vit_tiny", patch_size=16)
    >>> vit_ti16.count_params()  # ViT-Ti/16, 5.7M as in DeiT
    5717416

    References:
        - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929)
        - [Touvron et al., 2021, DeiT](https://arxiv.org/abs/2012.12877) (ViT-Ti, ViT-S)
    """
    sizes = {
        **DEFAULT_SIZES,
        **variant_sizes(
            VIT_VARIANTS,
            variant,
            hidden_dim=hidden_dim,
            num_layers=num_layers,
            num_heads=num_heads,
            intermediate_dim=intermediate_dim,
        ),
    }
    image_shape = check_image_shape(image_shape)
    num_classes = check_int("num_classes", num_classes)
    hidden_dim, num_heads = check_heads(sizes["hidden_dim"], sizes["num_heads"])
    num_layers = check_int("num_layers", sizes["num_layers"])
    intermediate_dim = check_int("intermediate_dim", sizes.get("intermediate_dim", 2 * hidden_dim))
    if position_embedding not in POSITION_EMBEDDINGS:
        raise ValueError(
            f"`position_embedding` must be one of {POSITION_EMBEDDINGS}. "
            f"Received: position_embedding={position_embedding!r}"
        )
    images = keras.Input(shape=image_shape, name="images")
    patches = PatchEmbedding(patch_size, hidden_dim, name="patch_embedding")
    x = patches(images)  # (batch, patches, hidden_dim)
    x = ClassToken(name="class_token")(x)  # (batch, 1 + patches, hidden_dim)
    grid = patches.output_grid(*image_shape[:2])
    if position_embedding == "learned":
        x = PositionEmbedding(1 + grid[0] * grid[1], name="position_embedding")(x)
    else:
        x = SinCosPositionEmbedding2D(grid, num_prefix_tokens=1, name="position_embedding")(x)
    for index, rate in enumerate(drop_path_rates(drop_path_rate, num_layers)):
        x = TransformerBlock(
            num_heads,
            intermediate_dim,
            dropout=dropout,
            drop_path_rate=rate,
            name=f"block_{index}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    logits = keras.layers.Dense(num_classes, name="head")(x[:, 0])  # (batch, classes)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(images, outputs, name=name)
