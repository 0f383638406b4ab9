"""The BSA block of BSARec (Shin et al., AAAI 2024).

"An Attentive Inductive Bias for Sequential Recommendation beyond the
Self-Attention": a fixed mix of a Fourier filter branch (an inductive bias
towards low frequencies, with a learnable gain on the high ones) and a causal
self-attention branch, followed by a feed-forward network. With `alpha=0` it
is exactly the SASRec block of the same official code.
"""

from collections.abc import Callable

import keras

from keras_attn._typing import Initializer, Tensor
from keras_attn.layers._activations import exportable_activation
from keras_attn.layers._config import argument_config
from keras_attn.layers._layer_norm import layer_norm
from keras_attn.layers.fourier_filter import FourierFilter
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.utils.initializers import clone_initializer
from keras_attn.utils.validation import (
    check_divisible,
    check_float,
    check_int,
    check_last_positions,
    check_optional_int,
    check_positive,
    check_rate,
    check_shape,
    feature_spec,
)

DEFAULT_KERNEL_INITIALIZER = {"class_name": "RandomNormal", "config": {"stddev": 0.02}}
# The official code's additive attention mask: masked logits get -10000.
OFFICIAL_ADDITIVE_MASK = -10000.0


@keras.saving.register_keras_serializable(package="keras_attn")
class BSARecBlock(keras.layers.Layer):
    """Beyond-self-attention block: `alpha * filter + (1 - alpha) * attention`, then FFN.

    Both branches read the block input `x` and carry their own residual
    connection and LayerNorm:

    - filter: `FourierFilter(x)`, i.e. `LayerNorm(dropout(low + beta * high) + x)`;
    - attention: `LayerNorm(dropout(attention(x)) + x)`, with the library's
      `MultiHeadSelfAttention` (logits scaled by `1 / sqrt(head_dim)`),
      causal and with padded keys removed, as in the official code;

    their mix `h = alpha * filter + (1 - alpha) * attention` goes through a
    post-norm feed-forward network: `LayerNorm(dropout(W2 act(W1 h)) + h)`.
    `alpha = 0` gives the SASRec block (no filter is built), `alpha = 1` the
    filter alone (no attention is built).

    Padded positions: like the official code, the block adds
    `additive_mask = -10000` to the logits of masked (padded or future)
    keys, the core's `additive_mask` option. A query that sees a real item
    gets the same weights as with exact masking; a padded query of a
    left-padded history (no key visible) attends over every position,
    future real items included, with weights `softmax(logits - 10000)`.
    Its output is never scored, but the next block's filter mixes every
    position, so it reaches the real positions: with two or more blocks
    this choice changes the model's outputs. `additive_mask=None` uses the
    core's exact masking instead, where a padded query gets a zero context.

    Args:
        num_heads: int, attention heads; the head size is `dim // num_heads`.
        alpha: float in `[0, 1]`, weight of the filter branch. The official
            code's default is `0.9`.
        cutoff: positive int, the paper's `c`: the filter keeps the lowest
            `cutoff // 2 + 1` frequency bins.
        intermediate_dim: int, hidden size of the feed-forward network.
            Defaults to `4 * dim`.
        dropout: float in `[0, 1)`, dropout on each branch output and on the
            feed-forward output (the paper's hidden dropout).
        attention_dropout: float in `[0, 1)`, dropout on the attention weights.
        layer_norm_epsilon: float, epsilon of the LayerNorms (`1e-12` in the
            official code).
        additive_mask: negative float or `None`, the attention core's
            `additive_mask`: added to the logits of masked keys. Defaults to
            the official code's `-10000.0`; `None` masks exactly (padded
            queries get a zero context).
        activation: activation of the feed-forward hidden layer; `"gelu"` is
            the exact (erf) GELU.
        kernel_initializer: initializer of every kernel. Defaults to a normal
            with standard deviation 0.02, like the official code. Biases start
            at zero.
        seed: int, seed of the dropout layers.
        last_positions: optional int, how many last positions the block
            outputs. `None` (default) outputs every position. An int `n`
            computes only the outputs at the last `n` positions (every
            position is still read): the final block of a model that scores
            the most recent position, such as `build_bsarec`, with a small
            part of the cost. Its outputs are those of the full block at
            those positions without dropout; active dropout draws its masks
            for the computed positions only, so with it they have the same
            distribution as the full block's.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, length, dim)`.
        mask: optional boolean `(batch, length)` padding mask (Keras masking);
            `False` items are never attended to.
        training: bool, whether dropout is active.

    Returns:
        `(batch, length, dim)`, or `(batch, last_positions, dim)`.

    Example:

    >>> block = BSARecBlock(num_heads=2, alpha=0.7, cutoff=5)
    >>> block(np.random.normal(size=(2, 10, 16))).shape
    (2, 10, 16)

    References:
        - [Shin et al., 2024](https://arxiv.org/abs/2312.10325)
        - [Kang & McAuley, 2018 (SASRec)](https://arxiv.org/abs/1808.09781)
    """

    def __init__(
        self,
        num_heads: int,
        alpha: float = 0.9,
        cutoff: int = 3,
        intermediate_dim: int | None = None,
        dropout: float = 0.0,
        attention_dropout: float = 0.0,
        layer_norm_epsilon: float = 1e-12,
        additive_mask: float | None = OFFICIAL_ADDITIVE_MASK,
        activation: str | Callable[[Tensor], Tensor] | None = "gelu",
        kernel_initializer: Initializer | None = None,
        seed: int | None = None,
        last_positions: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.num_heads = check_int("num_heads", num_heads)
        self.alpha = check_float("alpha", alpha, 0.0, 1.0)
        self.cutoff = check_int("cutoff", cutoff)
        self.intermediate_dim = check_optional_int("intermediate_dim", intermediate_dim)
        self.dropout = check_rate("dropout", dropout)
        self.attention_dropout = check_rate("attention_dropout", attention_dropout)
        self.layer_norm_epsilon = check_positive("layer_norm_epsilon", layer_norm_epsilon)
        self.additive_mask = (
            None
            if additive_mask is None
            else check_float("additive_mask", additive_mask, high=0.0, high_open=True)
        )
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(
            kernel_initializer or DEFAULT_KERNEL_INITIALIZER
        )
        self.seed = check_optional_int("seed", seed, minimum=0)
        self.last_positions = check_optional_int("last_positions", last_positions)
        self.supports_masking = True

    @property
    def uses_filter(self):
        return self.alpha > 0.0

    @property
    def uses_attention(self):
        return self.alpha < 1.0

    def build(self, input_shape):
        self.input_spec = feature_spec(input_shape)
        dim = input_shape[-1]
        check_divisible("input_shape[-1]", dim, "num_heads", self.num_heads)
        if self.uses_filter:
            self.fourier_filter = FourierFilter(
                self.cutoff,
                dropout=self.dropout,
                layer_norm_epsilon=self.layer_norm_epsilon,
                seed=self.seed,
                dtype=self.dtype_policy,
                name="fourier_filter",
            )
            self.fourier_filter.build(input_shape)
        if self.uses_attention:
            self.attention = MultiHeadSelfAttention(
                self.num_heads,
                dim // self.num_heads,
                dropout=self.attention_dropout,
                attention_pattern="causal",
                additive_mask=self.additive_mask,
                kernel_initializer=clone_initializer(self.kernel_initializer),
                seed=self.seed,
                dtype=self.dtype_policy,
                name="attention",
            )
            self.attention.build(input_shape)
            self.attention_norm = self._built_norm("attention_norm", input_shape)
        hidden_dim = self.intermediate_dim or 4 * dim
        self.intermediate_dense = self._dense(
            hidden_dim, "intermediate_dense", input_shape, exportable_activation(self.activation)
        )
        self.output_dense = self._dense(dim, "output_dense", (*input_shape[:-1], hidden_dim))
        self.output_norm = self._built_norm("output_norm", input_shape)
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy
        )

    def _built_norm(self, name, input_shape):
        norm = layer_norm(name, self.layer_norm_epsilon, self.dtype_policy)
        norm.build(input_shape)
        return norm

    def _dense(self, units, name, input_shape, activation=None):
        dense = keras.layers.Dense(
            units,
            activation=activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            dtype=self.dtype_policy,
            name=name,
        )
        dense.build(input_shape)
        return dense

    def call(
        self, inputs: Tensor, mask: Tensor | None = None, training: bool | None = None
    ) -> Tensor:
        check_shape("mask", mask, (inputs.shape[0], inputs.shape[1]))
        if self.last_positions is not None:
            check_last_positions("last_positions", self.last_positions, inputs.shape[1])
        last = self.last_positions
        residual = inputs if last is None else inputs[:, -last:]  # (batch, positions, dim)
        mixed = 0.0
        if self.uses_filter:
            if last is None:
                filtered = self.fourier_filter(inputs, training=training)
            else:
                filtered = self.fourier_filter.filter_last_positions(
                    inputs, last, training=training
                )
            mixed = self.alpha * filtered  # (batch, positions, dim)
        if self.uses_attention:
            if last is None:
                attended = self.attention(inputs, mask=mask, training=training)
            else:
                attended = self.attention.attend_last_positions(
                    inputs, last, mask=mask, training=training
                )  # (batch, last, dim)
            dropped = self.dropout_layer(attended, training=training)
            attended = self.attention_norm(dropped + residual)
            mixed = mixed + (1.0 - self.alpha) * attended
        hidden = self.output_dense(self.intermediate_dense(mixed))
        return self.output_norm(self.dropout_layer(hidden, training=training) + mixed)

    def compute_mask(self, inputs, mask=None):
        if mask is None or self.last_positions is None:
            return mask
        return mask[:, -self.last_positions :]

    def compute_output_shape(self, input_shape):
        if self.last_positions is None:
            return input_shape
        return (input_shape[0], self.last_positions, input_shape[2])

    def get_config(self):
        arguments = (
            "num_heads",
            "alpha",
            "cutoff",
            "intermediate_dim",
            "dropout",
            "attention_dropout",
            "layer_norm_epsilon",
            "additive_mask",
            "activation",
            "kernel_initializer",
            "seed",
            "last_positions",
        )
        return {**super().get_config(), **argument_config(self, arguments)}
