"""Length-relative position encodings with learned frequencies (Chiang & Cholak, 2022)."""

import math

import keras
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.utils.validation import check_int


@keras.saving.register_keras_serializable(package="keras_attn")
class LearnedScalePositions(keras.layers.Layer):
    """Position encodings `i / n · exp(γ)` and `cos(π i · exp(γ))` with learned `γ`.

    The position encoding of the learned PARITY/FIRST transformers of
    "Overcoming a Theoretical Limitation of Self-Attention": at position `i`
    (from 0) of a sequence of `n` positions, the first half of the channels
    is `i / n · exp(γ_j)` and the second half `cos(π i · exp(γ_j))`, with one
    learned log-scale `γ_j` per channel pair (initialised from a unit
    normal). `exp(γ) = 1` gives the exact constructions' features `i / n` and
    `(-1)^i`; learning `γ` lets a model pick its own frequencies. The
    encoding depends only on `i` and `n`, so one model reads any length.

    Args:
        width: int, even, size of the encoding.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: tensor `(batch, length, ...)`; only its first two sizes are
            read (for example int tokens `(batch, length)`).

    Returns:
        `(batch, length, width)` encodings.

    Example:

    >>> layer = LearnedScalePositions(4)
    >>> layer(np.zeros((2, 5), "int32")).shape
    (2, 5, 4)

    References:
        - [Chiang & Cholak, 2022](https://arxiv.org/abs/2202.12172)
    """

    def __init__(self, width: int, **kwargs):
        super().__init__(**kwargs)
        self.width = check_int("width", width, minimum=2)
        if self.width % 2:
            raise ValueError(f"`width` must be even. Received: width={width}")

    def build(self, input_shape):
        self.log_scales = self.add_weight(
            name="log_scales",
            shape=(self.width // 2,),
            initializer=keras.initializers.RandomNormal(stddev=1.0),
        )

    def call(self, inputs: Tensor) -> Tensor:
        batch, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        # In float32 whatever the policy: float16 cannot hold π i exp(γ) precisely.
        positions = ops.cast(ops.arange(0, length), "float32")[:, None]  # (length, 1)
        scales = ops.exp(ops.cast(self.log_scales, "float32"))[None]  # (1, width / 2)
        total = ops.cast(length, "float32")
        encoding = ops.concatenate(
            [positions / total * scales, ops.cos(math.pi * positions * scales)], axis=-1
        )  # (length, width)
        encoding = ops.cast(encoding, self.compute_dtype)
        return ops.broadcast_to(encoding[None], (batch, length, self.width))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], input_shape[1], self.width)

    def get_config(self):
        config = super().get_config()
        config.update({"width": self.width})
        return config
