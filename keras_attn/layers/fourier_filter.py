"""The frequency filter of BSARec (Shin et al., AAAI 2024).

"An Attentive Inductive Bias for Sequential Recommendation beyond the
Self-Attention": a Fourier low-pass filter along the sequence axis splits a
sequence into its low- and high-frequency parts, and a learnable per-channel
weight rescales the high frequencies before a residual connection and
LayerNorm.
"""

import math

import keras
from keras import ops

from keras_attn.utils.validation import (
    check_int,
    check_optional_int,
    check_positive,
    check_rate,
    check_shape,
    static_size,
)

DEFAULT_SQRT_BETA_INITIALIZER = {"class_name": "RandomNormal", "config": {"stddev": 1.0}}


@keras.saving.register_keras_serializable(package="keras_attn")
class FourierFilter(keras.layers.Layer):
    """Low-pass Fourier filter with a learnable high-frequency gain.

    For an input `x` of shape `(batch, length, dim)`:

    1. `X = rfft(x)` along the sequence axis (`length // 2 + 1` bins);
    2. keep the lowest `cutoff // 2 + 1` bins, zero the rest:
       `low = irfft(X_kept, n=length)`, `high = x - low`;
    3. `filtered = low + beta * high`, with `beta = sqrt_beta ** 2` a
       learnable `(dim,)` vector (one gain per channel);
    4. `output = LayerNorm(dropout(filtered) + x)`.

    The paper uses `norm="ortho"` for both transforms. Filtering is linear,
    so the normalisation cancels between `rfft` and `irfft`. Only the kept
    bins are needed, so the layer computes them as a direct transform,
    `O(length * kept bins)` per channel, in float32 also under mixed
    precision; this needs no static length, so the layer also exports with
    a length known only at serving time.

    Like the official code, the filter mixes every position, padded ones
    included, and sees the whole sequence (it is not causal): a model must
    only read the output at positions whose future is not a target.

    Args:
        cutoff: positive int, the paper's `c`. The lowest `cutoff // 2 + 1`
            frequency bins are kept (all of them when that is at least
            `length // 2 + 1`).
        dropout: float in `[0, 1)`, dropout on the filtered sequence.
        layer_norm_epsilon: float, epsilon of the LayerNorm. The official
            code uses `1e-12`.
        sqrt_beta_initializer: initializer of `sqrt_beta`. Defaults to a
            standard normal, like the official code.
        seed: int, seed of the dropout.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: tensor of shape `(batch, length, dim)`.
        mask: optional `(batch, length)` Keras padding mask. It is passed on
            unchanged; the filter itself, like the official code, does not
            treat padded positions specially.
        training: bool, whether dropout is active.

    Returns:
        Tensor of shape `(batch, length, dim)`.

    Example:

    >>> layer = FourierFilter(cutoff=3)
    >>> layer(np.random.normal(size=(2, 10, 8))).shape
    (2, 10, 8)

    References:
        - [Shin et al., 2024](https://arxiv.org/abs/2312.10325)
    """

    def __init__(
        self,
        cutoff=3,
        dropout=0.0,
        layer_norm_epsilon=1e-12,
        sqrt_beta_initializer=None,
        seed=None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.cutoff = check_int("cutoff", cutoff)
        self.dropout = check_rate("dropout", dropout)
        self.layer_norm_epsilon = check_positive("layer_norm_epsilon", layer_norm_epsilon)
        self.sqrt_beta_initializer = keras.initializers.get(
            sqrt_beta_initializer or DEFAULT_SQRT_BETA_INITIALIZER
        )
        self.seed = check_optional_int("seed", seed, minimum=0)
        self._input_dim = None
        self.supports_masking = True

    @property
    def kept_bins(self):
        """Number of low-frequency bins the filter keeps: `cutoff // 2 + 1`."""
        return self.cutoff // 2 + 1

    def build(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(
                "`inputs` must have rank 3, (batch, length, dim). "
                f"Received: input_shape={input_shape}"
            )
        self._input_dim = input_shape[-1]
        self.sqrt_beta = self.add_weight(
            name="sqrt_beta", shape=(input_shape[-1],), initializer=self.sqrt_beta_initializer
        )
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon, dtype=self.dtype_policy, name="layer_norm"
        )
        self.layer_norm.build(input_shape)

    def low_pass(self, inputs):
        """The low-frequency part of `inputs`, same shape and dtype.

        Args:
            inputs: tensor of shape `(batch, length, dim)`.

        Returns:
            `irfft` of the lowest `kept_bins` bins of `rfft(inputs)` taken
            along the sequence axis.
        """
        length = ops.shape(inputs)[1]
        bins = self.kept_bins
        if static_size(length) is not None:
            bins = min(bins, static_size(length) // 2 + 1)
        n = ops.cast(length, "int32")
        frequencies = ops.arange(bins, dtype="int32")  # (bins,)
        positions = ops.arange(length, dtype="int32")  # (length,)
        # 2 pi (k t mod L) / L: reduced mod L first so float32 stays exact.
        turns = ops.mod(frequencies[:, None] * positions[None, :], n)  # (bins, length)
        angles = ops.cast(turns, "float32") * (2.0 * math.pi / ops.cast(n, "float32"))
        cos, sin = ops.cos(angles), ops.sin(angles)  # (bins, length) each
        x = ops.cast(inputs, "float32")
        real = ops.einsum("kt,btd->bkd", cos, x)  # (batch, bins, dim)
        imag = ops.einsum("kt,btd->bkd", sin, x)  # (batch, bins, dim), sign dropped
        # Inverse weights: 1 for the mean and the Nyquist bin, 2 for a bin
        # that stands for itself and its mirror, 0 above L / 2; over L.
        doubled = 2 * frequencies
        weight = ops.where(ops.logical_or(doubled == 0, doubled == n), 1.0, 2.0)
        weight = ops.where(doubled <= n, weight, 0.0) / ops.cast(n, "float32")  # (bins,)
        low = ops.einsum("kt,bkd->btd", cos, real * weight[:, None]) + ops.einsum(
            "kt,bkd->btd", sin, imag * weight[:, None]
        )  # (batch, length, dim)
        return ops.cast(low, inputs.dtype)

    def call(self, inputs, mask=None, training=None):
        check_shape("inputs", inputs, (None, None, self._input_dim))
        check_shape("mask", mask, (inputs.shape[0], inputs.shape[1]))
        if static_size(inputs.shape[1]) == 0:
            return self.layer_norm(inputs)
        low = self.low_pass(inputs)
        high = inputs - low
        beta = ops.cast(ops.square(self.sqrt_beta), inputs.dtype)  # (dim,)
        filtered = low + beta * high
        filtered = self.dropout_layer(filtered, training=training)
        return self.layer_norm(filtered + inputs)

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "cutoff": self.cutoff,
                "dropout": self.dropout,
                "layer_norm_epsilon": self.layer_norm_epsilon,
                "sqrt_beta_initializer": keras.initializers.serialize(self.sqrt_beta_initializer),
                "seed": self.seed,
            }
        )
        return config
