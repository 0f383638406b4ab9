"""The Tokens-to-Token module of T2T-ViT.

Yuan et al., "Tokens-to-Token ViT: Training Vision Transformers from Scratch
on ImageNet", ICCV 2021 (https://arxiv.org/abs/2101.11986).
"""

from collections.abc import Sequence

import keras
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.layers._config import argument_config
from keras_attn.layers.soft_split import SoftSplit
from keras_attn.layers.token_performer import TokenPerformer
from keras_attn.layers.token_transformer import TokenTransformer
from keras_attn.utils.grids import window_grid
from keras_attn.utils.validation import (
    check_choice,
    check_int,
    check_ints,
    check_optional_int,
    feature_spec,
    renamed_config,
)

TOKEN_LAYERS = ("performer", "transformer")


@keras.saving.register_keras_serializable(package="keras_attn")
class T2TModule(keras.layers.Layer):
    """Soft split, token layer, re-structurisation (twice), soft split, projection.

    Step by step, for the paper's 224-pixel setting: soft split 0 (kernel 7,
    stride 4, padding 2) gives 3136 tokens of `3 * 49 = 147` features; a
    token layer maps them to `token_dim`; the tokens are laid back on their
    56 x 56 grid (re-structurisation) and soft split 1 (3, 2, 1) gives 784
    tokens of `9 * token_dim`; a second token layer and re-structurisation,
    then soft split 2 (3, 2, 1) gives 196 tokens, and a Dense layer projects
    them to `hidden_dim`. Soft splits lay features out channel-major (see
    `SoftSplit`).

    Args:
        hidden_dim: int, output token size (the backbone's width).
        token_layer: `"performer"` (T2T-ViT) or `"transformer"` (T2T-ViT_t).
        token_dim: int, size of the tokens between the soft splits.
        kernel_sizes: three ints, window of each soft split.
        strides: three ints, step of each soft split.
        paddings: three ints, zero padding of each soft split.
        seed: int, seed of the Performer's random features and dropout.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, height, width, channels)` or `(batch, height, width)`
            with known height and width.
        training: bool, whether dropout is active.

    Returns:
        `(batch, num_tokens, hidden_dim)`; `num_tokens` is given by
        `output_grid(height, width)`.

    Example:

    >>> T2TModule(hidden_dim=32, token_dim=16)(np.zeros((2, 64, 64, 3))).shape
    (2, 16, 32)

    References:
        - [Yuan et al., 2021](https://arxiv.org/abs/2101.11986)
    """

    def __init__(
        self,
        hidden_dim: int,
        token_layer: str = "performer",
        token_dim: int = 64,
        kernel_sizes: Sequence[int] = (7, 3, 3),
        strides: Sequence[int] = (4, 2, 2),
        paddings: Sequence[int] = (2, 1, 1),
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.hidden_dim = check_int("hidden_dim", hidden_dim)
        self.token_layer = check_choice("token_layer", token_layer, TOKEN_LAYERS)
        self.token_dim = check_int("token_dim", token_dim)
        self.kernel_sizes = check_ints("kernel_sizes", kernel_sizes, size=3)
        self.strides = check_ints("strides", strides, size=3)
        self.paddings = check_ints("paddings", paddings, size=3, minimum=0)
        for kernel_size, padding in zip(self.kernel_sizes, self.paddings, strict=True):
            if padding >= kernel_size:
                raise ValueError(
                    f"Each padding must be smaller than its kernel size {self.kernel_sizes}. "
                    f"Received: paddings={paddings!r}"
                )
        self.seed = check_optional_int("seed", seed, minimum=0)

    def _split_settings(self):
        return zip(self.kernel_sizes, self.strides, self.paddings, strict=True)

    def grids(self, height: int, width: int) -> list[tuple[int, int]]:
        """The `(rows, columns)` token grid after each of the three soft splits."""
        grids = []
        for kernel_size, stride, padding in self._split_settings():
            height, width = window_grid(height, width, kernel_size, stride, padding)
            grids.append((height, width))
        return grids

    def output_grid(self, height: int, width: int) -> tuple[int, int]:
        """`(rows, columns)` of the output tokens for an image size."""
        return self.grids(height, width)[-1]

    def build(self, input_shape):
        rank_spec = keras.InputSpec(ndim=len(input_shape))
        self.input_spec = feature_spec(input_shape) if len(input_shape) == 4 else rank_spec
        if len(input_shape) not in (3, 4) or None in input_shape[1:3]:
            raise ValueError(
                "`inputs` must be `(batch, height, width[, channels])` with known height "
                f"and width. Received: input_shape={input_shape}"
            )
        if min(min(grid) for grid in self.grids(*input_shape[1:3])) < 1:
            raise ValueError(
                f"The image is too small for the soft splits. Received: input_shape={input_shape}"
            )
        channels = input_shape[3] if len(input_shape) == 4 else 1
        self.soft_splits = [
            SoftSplit(k, s, p, dtype=self.dtype_policy, name=f"soft_split_{i}")
            for i, (k, s, p) in enumerate(self._split_settings())
        ]
        self.token_layers = [self._token_layer(i) for i in range(2)]
        self.projection = keras.layers.Dense(
            self.hidden_dim, dtype=self.dtype_policy, name="projection"
        )
        grids = self.grids(*input_shape[1:3])
        sizes = [channels * self.kernel_sizes[0] ** 2, self.token_dim * self.kernel_sizes[1] ** 2]
        for layer, grid, size in zip(self.token_layers, grids[:2], sizes, strict=True):
            layer.build((input_shape[0], grid[0] * grid[1], size))
        last = grids[-1]
        self.projection.build(
            (input_shape[0], last[0] * last[1], self.token_dim * self.kernel_sizes[2] ** 2)
        )

    def _token_layer(self, index):
        name = f"token_layer_{index}"
        if self.token_layer == "performer":
            seed = None if self.seed is None else self.seed + index
            return TokenPerformer(self.token_dim, seed=seed, dtype=self.dtype_policy, name=name)
        return TokenTransformer(self.token_dim, dtype=self.dtype_policy, name=name)

    def call(self, inputs: Tensor, training: bool | None = None) -> Tensor:
        grids = self.grids(*inputs.shape[1:3])
        x = self.soft_splits[0](ops.cast(inputs, self.compute_dtype))  # (batch, L0, c * k0^2)
        for index in range(2):
            x = self.token_layers[index](x, training=training)  # (batch, L_i, token_dim)
            rows, columns = grids[index]
            x = ops.reshape(x, (-1, rows, columns, self.token_dim))  # (batch, rows, cols, token)
            x = self.soft_splits[index + 1](x)  # (batch, L_{i+1}, token_dim * k_{i+1}^2)
        return self.projection(x)  # (batch, L2, hidden_dim)

    def compute_output_shape(self, input_shape):
        rows, columns = self.output_grid(*input_shape[1:3])
        return (input_shape[0], rows * columns, self.hidden_dim)

    def get_config(self):
        arguments = (
            "hidden_dim",
            "token_layer",
            "token_dim",
            "kernel_sizes",
            "strides",
            "paddings",
            "seed",
        )
        return {**super().get_config(), **argument_config(self, arguments)}

    @classmethod
    def from_config(cls, config):
        # Configs saved before the rename name the output size `embed_dim`.
        return super().from_config(renamed_config(config, {"embed_dim": "hidden_dim"}))
