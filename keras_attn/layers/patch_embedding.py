"""Patch embedding of images into a token sequence (Dosovitskiy et al., 2021)."""

import keras
from keras import ops

from keras_attn._typing import Initializer, Tensor
from keras_attn.layers._config import argument_config
from keras_attn.utils.grids import window_grid
from keras_attn.utils.validation import check_int, check_rank, feature_spec, renamed_config


@keras.saving.register_keras_serializable(package="keras_attn")
class PatchEmbedding(keras.layers.Layer):
    """Cuts an image into non-overlapping patches and embeds each one linearly.

    Equivalent to a `Conv2D` with kernel and stride `patch_size`, flattened
    row by row into `(batch, num_patches, hidden_dim)`. Grayscale images of rank 3
    `(batch, height, width)` get a channel axis first.

    Args:
        patch_size: int, side of the square patches; must divide the image.
        hidden_dim: int, embedding size (the model width).
        kernel_initializer: initializer of the projection kernel.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, height, width)` or `(batch, height, width, channels)`.

    Returns:
        `(batch, (height // patch_size) * (width // patch_size), hidden_dim)`.

    Example:

    >>> PatchEmbedding(patch_size=7, hidden_dim=16)(np.zeros((2, 28, 28))).shape
    (2, 16, 16)

    References:
        - [Dosovitskiy et al., 2021](https://arxiv.org/abs/2010.11929)
    """

    def __init__(
        self,
        patch_size: int,
        hidden_dim: int,
        kernel_initializer: Initializer = "glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.patch_size = check_int("patch_size", patch_size)
        self.hidden_dim = check_int("hidden_dim", hidden_dim)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)

    def build(self, input_shape):
        check_rank("inputs", input_shape, 3, 4)
        rank_spec = keras.InputSpec(ndim=len(input_shape))
        self.input_spec = feature_spec(input_shape) if len(input_shape) == 4 else rank_spec
        height, width = input_shape[1], input_shape[2]
        if height % self.patch_size or width % self.patch_size:
            raise ValueError(
                f"`patch_size={self.patch_size}` must divide the image height and width. "
                f"Received: input_shape={input_shape}"
            )
        channels = input_shape[3] if len(input_shape) == 4 else 1
        self.projection = keras.layers.Conv2D(
            self.hidden_dim,
            self.patch_size,
            strides=self.patch_size,
            kernel_initializer=self.kernel_initializer,
            dtype=self.dtype_policy,
            name="projection",
        )
        self.projection.build((input_shape[0], height, width, channels))

    def call(self, inputs: Tensor) -> Tensor:
        if len(inputs.shape) == 3:
            inputs = inputs[..., None]  # (batch, height, width, 1)
        patches = self.projection(ops.cast(inputs, self.compute_dtype))  # (batch, h, w, hidden_dim)
        grid = patches.shape[1] * patches.shape[2]
        return ops.reshape(patches, (-1, grid, self.hidden_dim))  # (batch, h * w, hidden_dim)

    def output_grid(self, height: int, width: int) -> tuple[int, int]:
        """`(rows, columns)` of the patches of an image size."""
        return window_grid(height, width, self.patch_size, self.patch_size)

    def compute_output_shape(self, input_shape):
        rows, columns = self.output_grid(input_shape[1], input_shape[2])
        return (input_shape[0], rows * columns, self.hidden_dim)

    def get_config(self):
        arguments = ("patch_size", "hidden_dim", "kernel_initializer")
        return {**super().get_config(), **argument_config(self, arguments)}

    @classmethod
    def from_config(cls, config):
        # Configs saved before the rename name the embedding size `dim`.
        return super().from_config(renamed_config(config, {"dim": "hidden_dim"}))
