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

POSITION_EMBEDDINGS = ("learned", "sincos")


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
    for index in range(depth):
        x = TransformerBlock(
            num_heads, int(dim * mlp_ratio), dropout=dropout, name=f"block_{index}"
        )(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    logits = keras.layers.Dense(num_classes, name="head")(x[:, 0])  # (batch, classes)
    outputs = keras.layers.Activation("softmax", dtype="float32", name="probabilities")(logits)
    return keras.Model(images, outputs, name=name)
