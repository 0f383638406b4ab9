"""A small Vision Transformer builder (Dosovitskiy et al., 2021).

Patch embedding, learned or fixed 2D sine-cosine positions, a class token,
pre-norm `TransformerBlock`s on the library's attention core and a linear
head on the class token. Later models (AdaViT, T2T-ViT) reuse its pieces.
"""

import keras

from keras_attn.layers import (
    ClassToken,
    PatchEmbedding,
    PositionEmbedding,
    SinCosPositionEmbedding2D,
    TransformerBlock,
)
from keras_attn.utils.validation import check_rate

POSITION_EMBEDDINGS = ("learned", "sincos")


def drop_path_rates(drop_path_rate, depth):
    """Per-block drop-path rates rising linearly from 0 to `drop_path_rate`.

    The stochastic-depth schedule of the official ViT-family code (and timm):
    block `i` of `depth` gets `drop_path_rate * i / (depth - 1)`, so the
    first block is never dropped and the last at the full rate.

    Args:
        drop_path_rate: float in `[0, 1)`, the rate of the last block.
        depth: int, number of blocks.

    Returns:
        A list of `depth` floats.

    Example:

    >>> drop_path_rates(0.1, 3)
    [0.0, 0.05, 0.1]
    """
    drop_path_rate = check_rate("drop_path_rate", drop_path_rate)
    if depth == 1:
        return [0.0]
    return [drop_path_rate * index / (depth - 1) for index in range(depth)]


def build_vision_transformer(
    image_shape,
    num_classes,
    patch_size=4,
    dim=64,
    depth=4,
    num_heads=4,
    mlp_ratio=2.0,
    dropout=0.0,
    position_embedding="learned",
    drop_path_rate=0.0,
    name="vision_transformer",
):
    """Builds a ViT classifier as a functional Keras model.

    Args:
        image_shape: `(height, width)` or `(height, width, channels)`.
        num_classes: int, size of the softmax output.
        patch_size: int, side of the square patches.
        dim: int, token size.
        depth: int, number of transformer blocks.
        num_heads: int, attention heads per block.
        mlp_ratio: float, MLP hidden size as a multiple of `dim`.
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

    >>> model = build_vision_transformer((28, 28), 10, patch_size=7, dim=32, depth=2)
    >>> model(np.zeros((2, 28, 28))).shape
    (2, 10)
    """
    if position_embedding not in POSITION_EMBEDDINGS:
        raise ValueError(
            f"`position_embedding` must be one of {POSITION_EMBEDDINGS}. "
            f"Received: position_embedding={position_embedding!r}"
        )
    for argument, value in (("depth", depth), ("num_classes", num_classes)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(
                f"`{argument}` must be a positive integer. Received: {argument}={value!r}"
            )
    images = keras.Input(shape=tuple(image_shape), name="images")
    x = PatchEmbedding(patch_size, dim, name="patch_embedding")(images)  # (batch, patches, dim)
    x = ClassToken(name="class_token")(x)  # (batch, 1 + patches, dim)
    grid = (image_shape[0] // patch_size, image_shape[1] // patch_size)
    if position_embedding == "learned":
        x = PositionEmbedding(1 + grid[0] * grid[1], name="position_embedding")(x)
    else:
        x = SinCosPositionEmbedding2D(grid, num_prefix_tokens=1, name="position_embedding")(x)
    for index, rate in enumerate(drop_path_rates(drop_path_rate, depth)):
        x = TransformerBlock(
            num_heads,
            int(dim * mlp_ratio),
            dropout=dropout,
            drop_path_rate=rate,
            name=f"block_{index}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    logits = keras.layers.Dense(num_classes, name="head")(x[:, 0])  # (batch, classes)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(images, outputs, name=name)
