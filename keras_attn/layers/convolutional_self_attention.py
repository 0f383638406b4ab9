"""Convolutional self-attention: queries and keys from a causal convolution.

Paper: Li et al., "Enhancing the Locality and Breaking the Memory Bottleneck
of Transformer on Time Series Forecasting", NeurIPS 2019.
"""

import keras
from keras import ops

from keras_attn._typing import Shape, Tensor
from keras_attn.layers.attention_pattern import AttentionPattern
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention, add_bias
from keras_attn.utils.validation import check_int


@keras.saving.register_keras_serializable(package="keras_attn")
class ConvolutionalSelfAttention(MultiHeadSelfAttention):
    """Self-attention whose queries and keys see a window of past inputs.

    Queries and keys come from a causal 1D convolution of kernel size `k`
    over the inputs (left-padded with `k - 1` zeros), so each query and key
    describes the local shape of the series ending at its position, not a
    single point. Values and the output projection stay position-wise. With
    `kernel_size=1` the layer is canonical self-attention: it keeps the
    Keras `MultiHeadAttention` kernel layout `(dim, heads, key_dim)` and
    equals `MultiHeadSelfAttention` with the same weights. With `k > 1` the
    query and key kernels are `(k, dim, heads, key_dim)`, tap `k - 1` being
    the current position.

    Any attention pattern of the core works: `"causal"` (full attention over
    the past, as in the paper), a `LogSparsePattern`, or another
    `AttentionPattern`. The convolution never looks ahead, so with a causal
    pattern no output depends on a later input. Padding masks remove keys,
    and the convolution reads padded inputs as zeros, like its own left
    padding: a left-padded sequence gives its real positions the outputs
    of the unpadded one, whatever the padding holds.

    Args:
        num_heads: int, number of attention heads.
        key_dim: int, size of each head for query and key.
        kernel_size: int >= 1, the convolution's kernel size `k`.
        attention_pattern: `"causal"` (default), `"dense"` or an
            `AttentionPattern`.
        **kwargs: the other arguments of `MultiHeadSelfAttention`
            (`value_dim`, `output_dim`, `dropout`, `use_bias`, initializers,
            regularizers, `logit_scale`, `seed`) and base layer arguments.

    Call arguments:
        inputs: tensor of shape `(batch, length, dim)`.
        **kwargs: `mask`, `head_mask`, `attention_mask` (dense patterns
            only), `training` and `return_attention_scores`, as for
            `MultiHeadSelfAttention`.

    Returns:
        `(batch, length, output_dim)`, and the attention weights if
        `return_attention_scores=True`.

    Example:

    >>> layer = ConvolutionalSelfAttention(num_heads=2, key_dim=8, kernel_size=3)
    >>> layer(np.ones((4, 10, 16))).shape
    (4, 10, 16)
    >>> tuple(layer.query_dense.kernel.shape)
    (3, 16, 2, 8)

    References:
        - [Li et al., 2019](https://arxiv.org/abs/1907.00235)
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        kernel_size: int = 1,
        attention_pattern: str | AttentionPattern | dict = "causal",
        **kwargs,
    ):
        kernel_size = check_int("kernel_size", kernel_size)
        super().__init__(num_heads, key_dim, attention_pattern=attention_pattern, **kwargs)
        self.kernel_size = kernel_size

    def make_projection(
        self, name: str, equation: str, output_shape: Shape, use_bias: bool | None = None
    ) -> keras.layers.Layer:
        if self.kernel_size == 1 or name not in ("query", "key"):
            return super().make_projection(name, equation, output_shape, use_bias)
        return _CausalConvProjection(
            self.kernel_size,
            self.num_heads,
            self.key_dim,
            use_bias=self.use_bias,
            **self.projection_kwargs(name),
        )

    def project_queries_and_keys(
        self, inputs: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        if mask is not None and self.kernel_size > 1:
            # The convolution reads the k - 1 earlier inputs: padded ones
            # count as zeros, like its own left padding.
            inputs = ops.where(ops.expand_dims(ops.cast(mask, "bool"), 2), inputs, 0.0)
        return super().project_queries_and_keys(inputs, mask)

    def get_config(self):
        config = super().get_config()
        config["kernel_size"] = self.kernel_size
        return config


class _CausalConvProjection(keras.layers.Layer):
    """Causal Conv1D from `(batch, length, dim)` to `(batch, length, heads, head_dim)`."""

    def __init__(
        self,
        kernel_size,
        num_heads,
        head_dim,
        use_bias,
        kernel_initializer,
        bias_initializer,
        kernel_regularizer,
        bias_regularizer,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.kernel_size = kernel_size
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.use_bias = use_bias
        self.kernel_initializer = kernel_initializer
        self.bias_initializer = bias_initializer
        self.kernel_regularizer = kernel_regularizer
        self.bias_regularizer = bias_regularizer

    def build(self, input_shape):
        self.kernel = self.add_weight(
            name="kernel",
            shape=(self.kernel_size, input_shape[-1], self.num_heads, self.head_dim),
            initializer=self.kernel_initializer,
            regularizer=self.kernel_regularizer,
        )
        self.bias = None
        if self.use_bias:
            self.bias = self.add_weight(
                name="bias",
                shape=(self.num_heads, self.head_dim),
                initializer=self.bias_initializer,
                regularizer=self.bias_regularizer,
            )

    def call(self, inputs):
        dim = ops.shape(inputs)[-1]
        padded = ops.pad(inputs, ((0, 0), (self.kernel_size - 1, 0), (0, 0)))
        # (kernel_size, dim, heads * head_dim): the heads flattened for conv.
        kernel = ops.reshape(self.kernel, (self.kernel_size, dim, -1))
        outputs = ops.conv(padded, kernel, padding="valid")  # (batch, length, heads * head_dim)
        outputs = ops.reshape(
            outputs, (-1, ops.shape(inputs)[1], self.num_heads, self.head_dim)
        )  # (batch, length, heads, head_dim)
        if self.bias is not None:
            outputs = add_bias(outputs, self.bias)
        return outputs
