"""Frozen 1D sinusoidal position table, as used by Tokens-to-Token ViT.

Yuan et al., "Tokens-to-Token ViT: Training Vision Transformers from Scratch
on ImageNet", ICCV 2021 (https://arxiv.org/abs/2101.11986), after Vaswani et
al., 2017.
"""

import keras
import numpy as np
from keras import ops

from keras_attn._typing import Tensor


@keras.saving.register_keras_serializable(package="keras_attn")
class SinCosPositionEmbedding1D(keras.layers.Layer):
    """Adds a frozen 1D sine-cosine table over every token position.

    Position `p` (counted from the first token, a class token included) gets
    `sin(p / 10000^(2i / dim))` in channel `2i` and `cos(...)` in channel
    `2i + 1` (interleaved, as in the official T2T-ViT code). The table is a
    non-trainable weight, so it is saved with the model and counted by
    `count_params()`, as the paper's parameter counts do.

    Args:
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, length, dim)` with a known `length`.

    Returns:
        `inputs` plus the table, same shape.

    Example:

    >>> SinCosPositionEmbedding1D()(np.zeros((2, 5, 8))).shape
    (2, 5, 8)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Yuan et al., 2021](https://arxiv.org/abs/2101.11986)
    """

    def __init__(self, **kwargs):
        super().__init__(**kwargs)

    def build(self, input_shape):
        self.input_spec = keras.InputSpec(shape=(None, *input_shape[1:]))
        length, dim = input_shape[1], input_shape[-1]
        if length is None:
            raise ValueError(
                f"The sequence length must be known. Received: input_shape={input_shape}"
            )
        self.table = self.add_weight(
            name="table", shape=(length, dim), initializer="zeros", trainable=False
        )
        self.table.assign(sinusoid_table(length, dim))

    def call(self, inputs: Tensor) -> Tensor:
        table = ops.cast(ops.convert_to_tensor(self.table), inputs.dtype)
        return inputs + table[None]  # (batch, length, dim)

    def compute_output_shape(self, input_shape):
        return input_shape


def sinusoid_table(length, dim):
    """The `(length, dim)` float32 table: sines in even, cosines in odd channels."""
    exponents = 2 * (np.arange(dim) // 2) / dim  # (dim,)
    angles = np.arange(length)[:, None] / np.power(10000.0, exponents)[None]  # (length, dim)
    table = np.where(np.arange(dim) % 2 == 0, np.sin(angles), np.cos(angles))
    return table.astype("float32")
