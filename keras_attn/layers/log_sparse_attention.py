"""LogSparse self-attention, with optional convolutional queries and keys.

Paper: Li et al., "Enhancing the Locality and Breaking the Memory Bottleneck
of Transformer on Time Series Forecasting", NeurIPS 2019.
"""

import keras

from keras_attn.layers.convolutional_self_attention import ConvolutionalSelfAttention
from keras_attn.layers.log_sparse_pattern import LogSparsePattern


@keras.saving.register_keras_serializable(package="keras_attn")
class LogSparseAttention(ConvolutionalSelfAttention):
    """Causal self-attention over `O(log L)` keys per query.

    Each query attends to itself and to keys a power of two back (see
    `LogSparsePattern` for the `"pure"`, `"local"` and `"restart"`
    variants). Every variant is a fixed list of `K = O(log L)` backward
    offsets, so the logits are computed one offset at a time from shifted
    views of the keys, and the context as a running sum over shifted views
    of the values, with a custom gradient of the same form: no key or value
    is copied per slot, memory grows as `O(L log L)` (the `(batch, heads,
    length, K)` weights) plus `O(L)`, and no `(length, length)` tensor is
    ever built. The output equals dense
    attention under the pattern's mask. `floor(log2 L) + 1` stacked layers
    connect every cell to its whole past.

    With `kernel_size > 1`, queries and keys come from a causal convolution
    (convolutional self-attention, see `ConvolutionalSelfAttention`): the
    paper's full model.

    Args:
        num_heads: int, number of attention heads.
        key_dim: int, size of each head for query and key.
        variant: `"pure"`, `"local"` or `"restart"`.
        local_window: int, dense window of the `"local"` variant.
        subsequence_length: int, subsequence length of the `"restart"`
            variant.
        kernel_size: int >= 1, kernel of the causal convolution of queries
            and keys; 1 is canonical attention.
        **kwargs: the other arguments of `MultiHeadSelfAttention`
            (`value_dim`, `output_dim`, `dropout`, `use_bias`, initializers,
            regularizers, `logit_scale`, `seed`) and base layer arguments.

    Call arguments:
        inputs: `(batch, length, dim)`.
        mask: optional boolean `(batch, length)` padding mask.
        head_mask: optional `(num_heads,)` or `(batch, num_heads)` head mask.
        training: bool, whether dropout is active.
        return_attention_scores: bool; the weights are
            `(batch, num_heads, length, K)`, one per gathered key slot.

    Returns:
        `(batch, length, output_dim)`, and the attention weights if
        `return_attention_scores=True`.

    Example:

    >>> layer = LogSparseAttention(num_heads=2, key_dim=8, variant="local",
    ...                            local_window=4, kernel_size=3)
    >>> outputs, weights = layer(np.ones((2, 64, 16)), return_attention_scores=True)
    >>> outputs.shape, weights.shape  # 4 local keys + 6 LogSparse steps
    ((2, 64, 16), (2, 2, 64, 10))

    References:
        - [Li et al., 2019](https://arxiv.org/abs/1907.00235)
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        variant: str = "pure",
        local_window: int | None = None,
        subsequence_length: int | None = None,
        kernel_size: int = 1,
        **kwargs,
    ):
        if "attention_pattern" in kwargs:
            raise ValueError(
                "`LogSparseAttention` sets its own pattern from `variant`; use "
                "`ConvolutionalSelfAttention` for other patterns. "
                f"Received: attention_pattern={kwargs['attention_pattern']!r}"
            )
        pattern = LogSparsePattern(variant, local_window, subsequence_length)
        super().__init__(
            num_heads, key_dim, kernel_size=kernel_size, attention_pattern=pattern, **kwargs
        )

    @property
    def variant(self):
        return self.attention_pattern.variant

    def get_config(self):
        config = super().get_config()
        config.pop("attention_pattern")
        config.update(self.attention_pattern.get_config())
        return config
