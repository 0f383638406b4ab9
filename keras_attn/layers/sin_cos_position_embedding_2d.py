"""Fixed 2D sine-cosine position embeddings for image patches."""

from collections.abc import Sequence

import keras
import numpy as np
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.utils.validation import check_int, check_ints, feature_spec


@keras.saving.register_keras_serializable(package="keras_attn")
class SinCosPositionEmbedding2D(keras.layers.Layer):
    """Adds fixed 2D sine-cosine embeddings of patch positions.

    Half of the channels encode the patch row, half the column, each as
    `[sin(p * w_k), cos(p * w_k)]` with `w_k = 10000^(-k / (dim / 4))`. Leading
    prefix tokens (such as a class token) get zeros. No weights.

    Args:
        grid_size: `(rows, columns)` of the patch grid.
        num_prefix_tokens: int, tokens before the patches that get no position.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, num_prefix_tokens + rows * columns, dim)`, `dim`
            divisible by 4.

    Returns:
        `inputs` plus the table, same shape.

    Example:

    >>> SinCosPositionEmbedding2D((2, 2), num_prefix_tokens=1)(np.zeros((1, 5, 8))).shape
    (1, 5, 8)

    References:
        - [Chen, Xie & He, 2021](https://arxiv.org/abs/2104.02057)
    """

    def __init__(self, grid_size: Sequence[int], num_prefix_tokens: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.grid_size = check_ints("grid_size", grid_size, size=2)
        self.num_prefix_tokens = check_int("num_prefix_tokens", num_prefix_tokens, minimum=0)

    def build(self, input_shape):
        self.input_spec = feature_spec(input_shape)
        expected = self.num_prefix_tokens + self.grid_size[0] * self.grid_size[1]
        if input_shape[1] != expected or input_shape[-1] % 4:
            raise ValueError(
                f"Expected {expected} tokens and a size divisible by 4. "
                f"Received: input_shape={input_shape}"
            )
        self.table = sin_cos_table(self.grid_size, input_shape[-1], self.num_prefix_tokens)

    def call(self, inputs: Tensor) -> Tensor:
        return inputs + ops.cast(self.table, inputs.dtype)[None]  # (batch, tokens, dim)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update({"grid_size": self.grid_size, "num_prefix_tokens": self.num_prefix_tokens})
        return config


def sin_cos_table(grid_size, dim, num_prefix_tokens=0):
    """The `(num_prefix_tokens + rows * columns, dim)` float32 table."""
    frequencies = 10000.0 ** (-np.arange(dim // 4) / (dim // 4))  # (dim / 4,)
    rows, columns = np.meshgrid(
        np.arange(grid_size[0]), np.arange(grid_size[1]), indexing="ij"
    )  # (rows, columns) each
    parts = []
    for positions in (rows.reshape(-1), columns.reshape(-1)):
        angles = positions[:, None] * frequencies[None, :]  # (patches, dim / 4)
        parts += [np.sin(angles), np.cos(angles)]
    table = np.concatenate(parts, axis=1)  # (patches, dim)
    prefix = np.zeros((num_prefix_tokens, dim))
    return np.concatenate([prefix, table]).astype("float32")
