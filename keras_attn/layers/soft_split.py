"""Soft split of Tokens-to-Token ViT: overlapping patches as tokens.

Yuan et al., "Tokens-to-Token ViT: Training Vision Transformers from Scratch
on ImageNet", ICCV 2021 (https://arxiv.org/abs/2101.11986).
"""

import keras
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.utils.grids import window_grid
from keras_attn.utils.validation import check_int


@keras.saving.register_keras_serializable(package="keras_attn")
class SoftSplit(keras.layers.Layer):
    """Unfolds an image into overlapping square patches, one token each.

    The image is zero-padded by `padding` pixels on every side, then a
    `kernel_size` window slides with step `stride`; each window position
    becomes one token holding the window's pixels. Tokens come row by row.
    Inside a token the features are channel-major, `(channel, row, column)`:
    feature `c * k * k + i * k + j` is channel `c` at window row `i`,
    column `j`, the order of PyTorch's `nn.Unfold` used by the official code,
    so its token-layer weights apply unchanged. Implemented with `k * k`
    strided slices (pure data movement, no identity convolution).

    Args:
        kernel_size: int, side of the square window.
        stride: int, step between windows.
        padding: int, zeros added on each side of the height and width.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, height, width, channels)` or, for grayscale,
            `(batch, height, width)`, with known height and width.

    Returns:
        `(batch, out_height * out_width, channels * kernel_size**2)`, where
        `out_height = (height + 2 * padding - kernel_size) // stride + 1`
        (likewise `out_width`).

    Example:

    >>> SoftSplit(kernel_size=7, stride=4, padding=2)(np.zeros((2, 224, 224, 3))).shape
    (2, 3136, 147)

    References:
        - [Yuan et al., 2021](https://arxiv.org/abs/2101.11986)
    """

    def __init__(self, kernel_size: int, stride: int, padding: int = 0, **kwargs):
        super().__init__(**kwargs)
        self.kernel_size = check_int("kernel_size", kernel_size)
        self.stride = check_int("stride", stride)
        self.padding = check_int("padding", padding, minimum=0)
        if self.padding >= self.kernel_size:
            raise ValueError(
                f"`padding` must be smaller than `kernel_size={kernel_size}`. "
                f"Received: padding={padding}"
            )

    def output_grid(self, height: int, width: int) -> tuple[int, int]:
        """`(out_height, out_width)`, the window positions for an image size."""
        return window_grid(height, width, self.kernel_size, self.stride, self.padding)

    def build(self, input_shape):
        if len(input_shape) not in (3, 4) or None in input_shape[1:3]:
            raise ValueError(
                "`inputs` must be `(batch, height, width[, channels])` with known height "
                f"and width. Received: input_shape={input_shape}"
            )
        if min(self.output_grid(*input_shape[1:3])) < 1:
            raise ValueError(
                f"The image is smaller than `kernel_size={self.kernel_size}`. "
                f"Received: input_shape={input_shape}"
            )

    def call(self, inputs: Tensor) -> Tensor:
        if len(inputs.shape) == 3:
            inputs = inputs[..., None]  # (batch, height, width, 1)
        out_height, out_width = self.output_grid(*inputs.shape[1:3])
        pad = self.padding
        padded = ops.pad(inputs, ((0, 0), (pad, pad), (pad, pad), (0, 0)))
        row_span = self.stride * (out_height - 1) + 1
        column_span = self.stride * (out_width - 1) + 1
        windows = [
            padded[:, i : i + row_span : self.stride, j : j + column_span : self.stride, :]
            for i in range(self.kernel_size)
            for j in range(self.kernel_size)
        ]  # k * k tensors (batch, out_height, out_width, channels)
        patches = ops.stack(windows, axis=-1)  # (batch, out_h, out_w, channels, k * k)
        features = inputs.shape[-1] * self.kernel_size**2
        return ops.reshape(patches, (-1, out_height * out_width, features))  # (batch, L, c*k*k)

    def compute_output_shape(self, input_shape):
        out_height, out_width = self.output_grid(*input_shape[1:3])
        channels = input_shape[3] if len(input_shape) == 4 else 1
        return (input_shape[0], out_height * out_width, channels * self.kernel_size**2)

    def get_config(self):
        config = super().get_config()
        config.update(
            {"kernel_size": self.kernel_size, "stride": self.stride, "padding": self.padding}
        )
        return config
