"""The frequency filter of BSARec (Shin et al., AAAI 2024).

"An Attentive Inductive Bias for Sequential Recommendation beyond the
Self-Attention": a Fourier low-pass filter along the sequence axis splits a
sequence into its low- and high-frequency parts, and a learnable per-channel
weight rescales the high frequencies before a residual connection and
LayerNorm.
"""

import math

import keras
import numpy as np
from keras import ops

from keras_attn._typing import Initializer, Tensor
from keras_attn.layers._config import argument_config
from keras_attn.utils.validation import (
    check_int,
    check_last_positions,
    check_optional_int,
    check_positive,
    check_rate,
    check_shape,
    sequence_positions,
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
    so the normalisation cancels between `rfft` and `irfft`, and the layer
    needs no FFT op, which ONNX and TFLite converters cannot all lower. With
    a static length `L`, the low-pass filter is one `(L, L)` matrix,
    computed in float64 when the layer is traced, and `low` is a matmul
    with it: every converter lowers that. With a length known only at
    serving time, the layer computes the kept bins as a direct transform,
    `O(length * kept bins)` per channel. Both run in float32, also under
    mixed precision.

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
        cutoff: int = 3,
        dropout: float = 0.0,
        layer_norm_epsilon: float = 1e-12,
        sqrt_beta_initializer: Initializer | None = None,
        seed: int | None = None,
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

    def low_pass(self, inputs: Tensor) -> Tensor:
        """The low-frequency part of `inputs`, same shape and dtype.

        Args:
            inputs: tensor of shape `(batch, length, dim)`.

        Returns:
            `irfft` of the lowest `kept_bins` bins of `rfft(inputs)` taken
            along the sequence axis.
        """
        x = ops.cast(inputs, "float32")
        length = static_size(inputs.shape[1])
        if length is None:
            low = self._dynamic_low_pass(x)
        else:
            projection = ops.convert_to_tensor(self._low_pass_matrix(length), "float32")
            # A broadcast matmul, (length, length) @ (batch, length, dim): TFLite's
            # converter miscompiles the einsum "ts,bsd->btd" with a dynamic batch.
            low = ops.matmul(projection, x)  # (batch, length, dim)
        return ops.cast(low, inputs.dtype)

    def _low_pass_matrix(self, length):
        """The `(length, length)` low-pass matrix `P`, `low = P @ x`, as float64 numpy.

        `P[t, s] = sum_k weight_k cos(2 pi k (t - s) / L)` over the kept bins
        `k`, with `weight_k` the inverse transform's weight of bin `k`: 1 for
        the mean and the Nyquist bin, 2 for a bin that stands for itself and
        its mirror, over `L`.
        """
        frequencies = np.arange(min(self.kept_bins, length // 2 + 1))  # (bins,)
        weight = np.where((frequencies == 0) | (2 * frequencies == length), 1.0, 2.0) / length
        offsets = np.arange(length)[:, None] - np.arange(length)[None, :]  # (length, length)
        # 2 pi (k (t - s) mod L) / L: reduced mod L first, exact for any length.
        turns = np.mod(frequencies[:, None, None] * offsets, length)  # (bins, length, length)
        return np.einsum("k,kts->ts", weight, np.cos(2.0 * np.pi * turns / length))

    def _dynamic_low_pass(self, x):
        """The low-pass part of float32 `x` whose length is known only when called."""
        length = ops.shape(x)[1]
        n = ops.cast(length, "int32")
        frequencies = ops.arange(0, self.kept_bins, dtype="int32")  # (bins,)
        positions = sequence_positions(length)  # (length,)
        # 2 pi (k t mod L) / L: reduced mod L first so float32 stays exact, as
        # k t - q L with q = floor(k t / L) (jax2onnx cannot lower `mod` at an
        # unknown length); a q one off moves the angle by a whole turn.
        products = ops.expand_dims(frequencies, 1) * positions  # (bins, length)
        wraps = ops.floor(ops.cast(products, "float32") / ops.cast(n, "float32"))
        turns = products - ops.cast(wraps, "int32") * n  # (bins, length)
        angles = ops.cast(turns, "float32") * (2.0 * math.pi / ops.cast(n, "float32"))
        cos, sin = ops.cos(angles), ops.sin(angles)  # (bins, length) each
        # Broadcast matmuls, not einsums: jax2onnx's einsum cannot take two
        # operands that share the unknown length.
        real = ops.matmul(cos, x)  # (bins, length) @ (batch, length, dim) -> (batch, bins, dim)
        imag = ops.matmul(sin, x)  # (batch, bins, dim), sign dropped
        # Inverse weights: 1 for the mean and the Nyquist bin, 2 for a bin
        # that stands for itself and its mirror, 0 above L / 2; over L.
        doubled = 2 * frequencies
        weight = ops.where(ops.logical_or(doubled == 0, doubled == n), 1.0, 2.0)
        weight = ops.where(doubled <= n, weight, 0.0) / ops.cast(n, "float32")  # (bins,)
        weight = ops.expand_dims(weight, 1)  # (bins, 1)
        low = ops.matmul(ops.transpose(cos), real * weight)  # (length, bins) @ (batch, bins, dim)
        return low + ops.matmul(ops.transpose(sin), imag * weight)  # (batch, length, dim)

    def call(
        self, inputs: Tensor, mask: Tensor | None = None, training: bool | None = None
    ) -> Tensor:
        check_shape("inputs", inputs, (None, None, self._input_dim))
        check_shape("mask", mask, (inputs.shape[0], inputs.shape[1]))
        if static_size(inputs.shape[1]) == 0:
            return self.layer_norm(inputs)
        return self._filtered(inputs, self.low_pass(inputs), training)

    def filter_last_positions(
        self, inputs: Tensor, count: int = 1, training: bool | None = None
    ) -> Tensor:
        """The filter's outputs at the last `count` positions only.

        What `call(inputs, training=training)[:, -count:]` returns (the low
        part still mixes every position), from the last `count` rows of the
        low-pass matrix: the norm and the rest run at those positions only.
        Active dropout draws its mask for those positions only: the outputs
        equal the full call's without dropout, and have the same
        distribution with it. A hook for a model's final block that scores
        its last position only.

        Args:
            inputs: `(batch, length, dim)`.
            count: int in `[1, length]`, how many last positions to compute.
            training: bool, whether dropout is active.

        Returns:
            `(batch, count, dim)`.

        Example:

        >>> layer = FourierFilter(cutoff=3)
        >>> x = np.random.normal(size=(2, 10, 8))
        >>> bool(np.allclose(layer(x)[:, -1:], layer.filter_last_positions(x), atol=1e-5))
        True
        """
        check_shape("inputs", inputs, (None, None, self._input_dim))
        count = check_last_positions("count", count, inputs.shape[1])
        length = static_size(inputs.shape[1])
        if length is None:  # the filter of a length known when run: computed whole
            return self(inputs, training=training)[:, -count:]
        inputs = ops.convert_to_tensor(inputs, self.compute_dtype)
        rows = ops.convert_to_tensor(self._low_pass_matrix(length)[-count:], "float32")
        low = ops.matmul(rows, ops.cast(inputs, "float32"))  # (batch, count, dim)
        last = inputs[:, -count:]  # (batch, count, dim)
        return self._filtered(last, ops.cast(low, inputs.dtype), training)

    def _filtered(self, inputs, low, training):
        """`LayerNorm(dropout(low + beta * (inputs - low)) + inputs)`."""
        beta = ops.cast(ops.square(self.sqrt_beta), inputs.dtype)  # (dim,)
        filtered = low + beta * (inputs - low)
        return self.layer_norm(self.dropout_layer(filtered, training=training) + inputs)

    def compute_mask(self, inputs, mask=None):
        return mask

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        arguments = ("cutoff", "dropout", "layer_norm_epsilon", "sqrt_beta_initializer", "seed")
        return {**super().get_config(), **argument_config(self, arguments)}
