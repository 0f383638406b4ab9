"""The frequency filter of BSARec (Shin et al., AAAI 2024).

"An Attentive Inductive Bias for Sequential Recommendation beyond the
Self-Attention": a Fourier low-pass filter along the sequence axis splits a
sequence into its low- and high-frequency parts, and a learnable per-channel
weight rescales the high frequencies before a residual connection and
LayerNorm.
"""

import keras
from keras import ops

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
    so the normalisation cancels between `rfft` and `irfft`: `keras.ops`'
    unnormalised pair gives exactly the same `low`. The FFTs run in float32
    also under mixed precision.

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
        if not isinstance(cutoff, int) or isinstance(cutoff, bool) or cutoff < 1:
            raise ValueError(f"`cutoff` must be a positive integer. Received: cutoff={cutoff!r}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"`dropout` must be in [0, 1). Received: dropout={dropout}")
        if not layer_norm_epsilon > 0.0:
            raise ValueError(
                f"`layer_norm_epsilon` must be positive. "
                f"Received: layer_norm_epsilon={layer_norm_epsilon}"
            )
        self.cutoff = cutoff
        self.dropout = dropout
        self.layer_norm_epsilon = layer_norm_epsilon
        self.sqrt_beta_initializer = keras.initializers.get(
            sqrt_beta_initializer or DEFAULT_SQRT_BETA_INITIALIZER
        )
        self.seed = seed
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
        signals = ops.transpose(ops.cast(inputs, "float32"), (0, 2, 1))  # (batch, dim, length)
        real, imag = ops.rfft(signals)  # each (batch, dim, length // 2 + 1)
        bins = ops.arange(ops.shape(real)[-1])  # (length // 2 + 1,)
        keep = ops.cast(bins < self.kept_bins, "float32")
        low = ops.irfft((real * keep, imag * keep), fft_length=length)  # (batch, dim, length)
        return ops.cast(ops.transpose(low, (0, 2, 1)), inputs.dtype)  # (batch, length, dim)

    def call(self, inputs, mask=None, training=None):
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
