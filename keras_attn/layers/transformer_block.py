"""A transformer encoder block on the library's attention core."""

import warnings
from collections.abc import Callable
from typing import Any

import keras
from keras import ops

from keras_attn._typing import Initializer, Tensor
from keras_attn.layers._activations import exportable_activation
from keras_attn.layers._config import argument_config
from keras_attn.layers._layer_norm import layer_norm
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.utils.initializers import clone_initializer
from keras_attn.utils.validation import (
    check_bool,
    check_divisible,
    check_int,
    check_optional_int,
    check_positive,
    check_rate,
    check_shape,
    feature_spec,
    renamed_arguments,
    renamed_config,
)

# Config keys of older `.keras` files: retired name -> current name.
RENAMED_CONFIG_KEYS = {"mlp_dim": "intermediate_dim", "norm_first": "normalize_first"}
# The arguments of the default attention that the block passes itself.
BLOCK_ATTENTION_ARGUMENTS = frozenset({"num_heads", "key_dim", "dropout", "dtype", "name"})


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerBlock(keras.layers.Layer):
    """Self-attention and a two-layer MLP, each with a residual connection.

    Pre-norm (`normalize_first=True`, as in ViT): `x + attn(LN(x))`, then
    `x + mlp(LN(x))`. Post-norm (as in BERT): `LN(x + attn(x))`, then
    `LN(x + mlp(x))`.

    The attention is a `MultiHeadSelfAttention` built from `num_heads`,
    `key_dim`, `attention_dropout` and `attention_kwargs`, or any attention
    layer passed as `attention` (for example a `LogSparseAttention` or a
    `ConvolutionalSelfAttention`): a layer with the core's call signature
    `attention(x, mask=None, head_mask=None, training=None,
    return_attention_scores=False)` that keeps the input size, or a
    `keras.layers.MultiHeadAttention`, which the block calls as
    self-attention (`query = value = x`, the padding mask as `query_mask`
    and `value_mask`; it takes no `head_mask`). The block
    serializes it in `get_config` and rebuilds it in `from_config`, as
    `keras.layers.Bidirectional` does with its layer.

    With `drop_path_rate=p > 0` (stochastic depth, Huang et al., 2016), each
    residual branch is dropped in training for a random fraction `p` of the
    examples (the whole branch of an example, independently for the
    attention and the MLP) and multiplied by `1 / (1 - p)` for the others;
    at inference the block is unchanged.

    Args:
        num_heads: int, attention heads. Optional with `attention`, whose
            `num_heads` it must then equal.
        intermediate_dim: int, hidden size of the MLP.
        key_dim: int, size of each head. Defaults to the input size over `num_heads`.
        dropout: float, dropout of the attention branch and of the MLP
            output, each before its residual addition.
        mlp_hidden_dropout: float or `None`, dropout of the MLP's hidden
            activations. `None` uses `dropout` (ViT's placement); BERT and
            KerasHub's `TransformerEncoder` have none there (0).
        attention_dropout: float, dropout of the attention weights.
        normalize_first: bool, pre-norm if `True`, post-norm otherwise (KerasHub's
            name; `norm_first` is its deprecated former name).
        layer_norm_epsilon: float, epsilon of the layer norms.
        activation: activation of the MLP's hidden layer.
        kernel_initializer: initializer of the MLP's kernels, cloned for each
            of its two dense layers (as KerasHub's `TransformerEncoder` does).
            The default attention's initializers are set in `attention_kwargs`.
        bias_initializer: initializer of the MLP's biases, cloned likewise.
        attention_kwargs: dict of further `MultiHeadSelfAttention` arguments
            (for example `attention_pattern`, `logit_scale`, `use_bias`).
        attention: optional attention layer (an unbuilt layer instance, or
            its `keras.saving.serialize_keras_object` dict) used instead of
            the default `MultiHeadSelfAttention`; `key_dim`,
            `attention_dropout` and `attention_kwargs` then stay unset.
        drop_path_rate: float in `[0, 1)`, probability that training drops
            a residual branch of an example (stochastic depth).
        seed: int, seed of the drop-path draws.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, length, dim)`.
        mask: optional `(batch, length)` padding mask (Keras masking).
        head_mask: optional `(num_heads,)` or `(batch, num_heads)` head mask.
        attention_mask: optional boolean `(batch, length, length)` mask passed
            to the attention: `attention_mask[b, i, j]` allows query `i` to
            attend to key `j` (as in `keras.layers.MultiHeadAttention` and
            KerasHub's `TransformerEncoder`); combined with `mask`.
        attention_gate: optional `(batch,)` or `(batch, length)` multiplier of
            the attention branch before its residual addition (1 keeps the
            branch, 0 skips it). A hook for gated blocks such as AdaViT's.
        mlp_gate: optional `(batch,)` or `(batch, length)` multiplier of the
            MLP branch before its residual addition.
        training: bool, whether dropout and drop path are active.
        return_attention_scores: bool, also return the attention weights.

    Returns:
        `(batch, length, dim)`, and the attention's weights (for the core
        `(batch, num_heads, length, keys)`) if `return_attention_scores=True`.

    Example:

    >>> TransformerBlock(num_heads=2, intermediate_dim=32)(np.zeros((2, 5, 16))).shape
    (2, 5, 16)
    >>> attention = LogSparseAttention(num_heads=2, key_dim=8, name="attention")
    >>> block = TransformerBlock(intermediate_dim=32, attention=attention)
    >>> block(np.zeros((2, 5, 16)), return_attention_scores=True)[1].shape
    (2, 2, 5, 4)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Huang et al., 2016](https://arxiv.org/abs/1603.09382) (drop path)
    """

    @renamed_arguments(norm_first="normalize_first")
    def __init__(
        self,
        num_heads: int | None = None,
        intermediate_dim: int | None = None,
        key_dim: int | None = None,
        dropout: float = 0.0,
        mlp_hidden_dropout: float | None = None,
        attention_dropout: float = 0.0,
        normalize_first: bool = True,
        layer_norm_epsilon: float = 1e-6,
        activation: str | Callable[[Tensor], Tensor] | None = "gelu",
        kernel_initializer: Initializer = "glorot_uniform",
        bias_initializer: Initializer = "zeros",
        attention_kwargs: dict[str, Any] | None = None,
        attention: keras.layers.Layer | dict | None = None,
        drop_path_rate: float = 0.0,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.intermediate_dim = check_int("intermediate_dim", intermediate_dim)
        self.key_dim = check_optional_int("key_dim", key_dim)
        self.dropout = check_rate("dropout", dropout)
        self.mlp_hidden_dropout = check_rate(
            "mlp_hidden_dropout", self.dropout if mlp_hidden_dropout is None else mlp_hidden_dropout
        )
        self.drop_path_rate = check_rate("drop_path_rate", drop_path_rate)
        self.seed = check_optional_int("seed", seed, minimum=0)
        if self.drop_path_rate > 0:
            self.drop_path_seed_generator = keras.random.SeedGenerator(self.seed)
        self.attention_dropout = check_rate("attention_dropout", attention_dropout)
        self.normalize_first = check_bool("normalize_first", normalize_first)
        self.layer_norm_epsilon = check_positive("layer_norm_epsilon", layer_norm_epsilon)
        self.activation = keras.activations.get(activation)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.attention_kwargs = _checked_attention_kwargs(attention_kwargs)
        self._custom_attention = attention is not None
        if self._custom_attention:
            self.attention = self._checked_attention(attention, num_heads)
            num_heads = self.attention.num_heads
        self.num_heads = check_int("num_heads", num_heads)
        self.supports_masking = True

    @property
    def norm_first(self) -> bool:
        """Deprecated alias of `normalize_first`."""
        warnings.warn(
            "`norm_first` is deprecated; use `normalize_first`.", DeprecationWarning, stacklevel=2
        )
        return self.normalize_first

    def _checked_attention(self, attention, num_heads):
        if isinstance(attention, dict):
            attention = keras.saving.deserialize_keras_object(attention)
        if not isinstance(attention, keras.layers.Layer) or not hasattr(attention, "num_heads"):
            raise ValueError(
                "`attention` must be an attention layer with a `num_heads` attribute. "
                f"Received: attention={attention!r}"
            )
        if num_heads is not None and num_heads != attention.num_heads:
            raise ValueError(
                f"`num_heads` must equal the `num_heads={attention.num_heads}` of `attention`. "
                f"Received: num_heads={num_heads!r}"
            )
        unused = {
            "key_dim": self.key_dim,
            "attention_dropout": self.attention_dropout or None,
            "attention_kwargs": self.attention_kwargs or None,
        }
        for name, value in unused.items():
            if value is not None:
                raise ValueError(
                    f"`{name}` configures the default attention and cannot be combined "
                    f"with `attention`. Received: {name}={value!r}"
                )
        return attention

    def build(self, input_shape):
        self.input_spec = feature_spec(input_shape)
        dim = input_shape[-1]
        if not self._custom_attention:
            self.attention = self._default_attention(dim)
        self.attention_norm = layer_norm(
            "attention_norm", self.layer_norm_epsilon, self.dtype_policy
        )
        self.mlp_norm = layer_norm("mlp_norm", self.layer_norm_epsilon, self.dtype_policy)
        self.mlp_hidden = self._mlp_dense(
            self.intermediate_dim, exportable_activation(self.activation), "mlp_hidden"
        )
        self.mlp_output = self._mlp_dense(dim, None, "mlp_output")
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.mlp_hidden_dropout_layer = keras.layers.Dropout(
            self.mlp_hidden_dropout, dtype=self.dtype_policy
        )
        if not self.attention.built:
            inputs, _ = self._attention_inputs(input_shape, None, None)
            self.attention.build(*inputs)
        self._check_attention_width(input_shape)
        self.attention_norm.build(input_shape)
        self.mlp_norm.build(input_shape)
        self.mlp_hidden.build(input_shape)
        self.mlp_output.build((*input_shape[:-1], self.intermediate_dim))

    def _mlp_dense(self, units, activation, name):
        return keras.layers.Dense(
            units,
            activation=activation,
            kernel_initializer=clone_initializer(self.kernel_initializer),
            bias_initializer=clone_initializer(self.bias_initializer),
            dtype=self.dtype_policy,
            name=name,
        )

    def _attention_inputs(self, x, mask, head_mask, attention_mask=None):
        """The attention's inputs and masks: `keras.layers.MultiHeadAttention` attends to `x`."""
        extra = {} if attention_mask is None else {"attention_mask": attention_mask}
        if not isinstance(self.attention, keras.layers.MultiHeadAttention):
            return (x,), {"mask": mask, "head_mask": head_mask, **extra}
        if head_mask is not None:
            raise ValueError(
                "`head_mask` needs an attention layer that takes one, which "
                "`keras.layers.MultiHeadAttention` does not. "
                f"Received: head_mask.shape={tuple(head_mask.shape)}"
            )
        return (x, x), {"query_mask": mask, "value_mask": mask, **extra}

    def _check_attention_width(self, input_shape):
        inputs, masks = self._attention_inputs(keras.KerasTensor(input_shape), None, None)
        width = self.attention.compute_output_spec(*inputs, **masks).shape[-1]
        if width != input_shape[-1]:
            raise ValueError(
                f"`attention` must keep the input size {input_shape[-1]}. "
                f"Received: attention with output size {width}"
            )

    def _default_attention(self, dim):
        if self.key_dim is None:
            check_divisible("input_shape[-1]", dim, "num_heads", self.num_heads)
        key_dim = self.key_dim or dim // self.num_heads
        return MultiHeadSelfAttention(
            self.num_heads,
            key_dim,
            dropout=self.attention_dropout,
            dtype=self.dtype_policy,
            name="attention",
            **self.attention_kwargs,
        )

    def call(
        self,
        inputs: Tensor,
        mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        attention_mask: Tensor | None = None,
        attention_gate: Tensor | None = None,
        mlp_gate: Tensor | None = None,
        training: bool | None = None,
        return_attention_scores: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        x = self.attention_norm(inputs) if self.normalize_first else inputs
        attended, scores = self._attend(
            x, mask, head_mask, attention_mask, training, return_attention_scores
        )
        attended = self.dropout_layer(attended, training=training)  # (batch, length, dim)
        x = inputs + _gated(self._drop_path(attended, training), attention_gate, "attention_gate")
        x = x if self.normalize_first else self.attention_norm(x)
        y = self._mlp(self.mlp_norm(x) if self.normalize_first else x, training)
        x = x + _gated(self._drop_path(y, training), mlp_gate, "mlp_gate")
        x = x if self.normalize_first else self.mlp_norm(x)
        return (x, scores) if return_attention_scores else x

    def _attend(
        self, x, mask, head_mask, attention_mask=None, training=None, return_attention_scores=False
    ):
        """`(attention(x), scores)`, with `scores=None` unless `return_attention_scores`."""
        attention_inputs, masks = self._attention_inputs(x, mask, head_mask, attention_mask)
        attended = self.attention(
            *attention_inputs,
            **masks,
            training=training,
            return_attention_scores=return_attention_scores,
        )
        return attended if return_attention_scores else (attended, None)

    def _mlp(self, x, training):
        """`dropout(mlp_output(dropout(mlp_hidden(x))))`, `(batch, length, dim)`."""
        hidden = self.mlp_hidden_dropout_layer(self.mlp_hidden(x), training=training)
        return self.dropout_layer(self.mlp_output(hidden), training=training)

    def attention_branch(
        self,
        inputs: Tensor,
        mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        training: bool | None = None,
        drop_path: bool = True,
        heads: Tensor | None = None,
    ) -> Tensor:
        """The attention branch of a pre-norm block, before its residual addition.

        `dropout(attention(LN(inputs)))`, with drop path unless
        `drop_path=False`: what `call` adds to `inputs`. A hook for models
        that gate, drop or skip tokens and heads (AdaViT), run on a whole
        sequence or on tokens gathered from it. With `heads`, only those
        heads are computed, by the attention's `attend_heads` (the core's).

        Args:
            inputs: `(batch, length, dim)` tokens.
            mask: optional boolean `(batch, length)`, the tokens that are keys.
            head_mask: optional `(num_heads,)` or `(batch, num_heads)` head
                mask; with `heads`, `(batch, h)`, one per head of `heads`.
            training: bool, whether dropout and drop path are active.
            drop_path: bool, whether drop path applies in training.
            heads: optional int `(h,)` or `(batch, h)`, the heads every
                example or each example computes.

        Returns:
            `(batch, length, dim)`.
        """
        self._check_pre_norm("attention_branch")
        x = self.attention_norm(inputs)
        if heads is not None:
            if not hasattr(self.attention, "attend_heads"):
                raise ValueError(
                    "`heads` needs an attention with `attend_heads`, such as the core. "
                    f"Received: attention={type(self.attention).__name__}"
                )
            attended = self.attention.attend_heads(x, heads, head_mask, mask, training=training)
        else:
            attended, _ = self._attend(x, mask, head_mask, training=training)
        attended = self.dropout_layer(attended, training=training)  # (batch, length, dim)
        return self._drop_path(attended, training) if drop_path else attended

    def mlp_branch(
        self,
        inputs: Tensor,
        channel_mask: Tensor | None = None,
        training: bool | None = None,
        drop_path: bool = True,
    ) -> Tensor:
        """The MLP branch of a pre-norm block, before its residual addition.

        `dropout(mlp_output(dropout(mlp_hidden(LN(inputs) * channel_mask))))`,
        with drop path unless `drop_path=False`: what `call` adds after the
        attention, without `channel_mask`.

        Args:
            inputs: `(batch, length, dim)` tokens.
            channel_mask: optional `(batch, dim)` multiplier of the MLP's input
                channels, such as AdaViT's zeros for the channels of the heads
                that are off.
            training: bool, whether dropout and drop path are active.
            drop_path: bool, whether drop path applies in training.

        Returns:
            `(batch, length, dim)`.
        """
        self._check_pre_norm("mlp_branch")
        y = self.mlp_norm(inputs)  # (batch, length, dim)
        if channel_mask is not None:
            check_shape("channel_mask", channel_mask, (inputs.shape[0], inputs.shape[-1]))
            y = y * ops.cast(channel_mask, y.dtype)[:, None, :]
        y = self._mlp(y, training)  # (batch, length, dim)
        return self._drop_path(y, training) if drop_path else y

    def _check_pre_norm(self, method):
        if not self.norm_first:
            raise ValueError(
                f"`{method}` is the branch of a pre-norm block. Received: norm_first=False"
            )

    def _drop_path(self, branch, training):
        """`branch` zeroed for a fraction `drop_path_rate` of the examples, else scaled up."""
        if not training or self.drop_path_rate == 0:
            return branch
        keep = 1.0 - self.drop_path_rate
        draws = keras.random.uniform(
            (ops.shape(branch)[0], 1, 1), seed=self.drop_path_seed_generator
        )  # (batch, 1, 1)
        scale = ops.cast(1.0 / keep, branch.dtype)
        return ops.where(draws < keep, branch * scale, ops.zeros((), branch.dtype))

    def compute_output_shape(self, input_shape):
        return input_shape

    def compute_output_spec(
        self,
        inputs: Tensor,
        mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        attention_mask: Tensor | None = None,
        attention_gate: Tensor | None = None,
        mlp_gate: Tensor | None = None,
        training: bool | None = None,
        return_attention_scores: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        output = keras.KerasTensor(inputs.shape, self.compute_dtype)
        if not return_attention_scores:
            return output
        attention_inputs, masks = self._attention_inputs(inputs, mask, head_mask, attention_mask)
        _, scores = self.attention.compute_output_spec(
            *attention_inputs, **masks, return_attention_scores=True
        )
        return output, scores

    def get_config(self):
        arguments = (
            "num_heads",
            "intermediate_dim",
            "key_dim",
            "dropout",
            "mlp_hidden_dropout",
            "drop_path_rate",
            "seed",
            "attention_dropout",
            "normalize_first",
            "layer_norm_epsilon",
            "activation",
            "kernel_initializer",
            "bias_initializer",
            "attention_kwargs",
        )
        config = {**super().get_config(), **argument_config(self, arguments)}
        config["attention"] = (
            keras.saving.serialize_keras_object(self.attention) if self._custom_attention else None
        )
        return config

    @classmethod
    def from_config(cls, config):
        return super().from_config(renamed_config(config, RENAMED_CONFIG_KEYS))


def _checked_attention_kwargs(attention_kwargs):
    """A copy of `attention_kwargs`, which must not set what the block sets itself."""
    if attention_kwargs is not None and not isinstance(attention_kwargs, dict):
        raise ValueError(
            f"`attention_kwargs` must be a dict. Received: attention_kwargs={attention_kwargs!r}"
        )
    attention_kwargs = dict(attention_kwargs or {})
    taken = sorted(BLOCK_ATTENTION_ARGUMENTS.intersection(attention_kwargs))
    if taken:
        raise ValueError(
            f"`attention_kwargs` cannot set {taken}: the block sets them (as its own "
            f"`num_heads`, `key_dim`, `attention_dropout`, `dtype`). "
            f"Received: attention_kwargs={attention_kwargs!r}"
        )
    return attention_kwargs


def _gated(branch, gate, name):
    """`branch` `(batch, length, dim)` scaled by a `(batch,)` or `(batch, length)` gate."""
    if gate is None:
        return branch
    batch, length = branch.shape[0], branch.shape[1]
    check_shape(name, gate, (batch,), (batch, length))
    gate = keras.ops.cast(gate, branch.dtype)
    gate = gate[:, None, None] if len(gate.shape) == 1 else gate[..., None]
    return branch * gate  # (batch, length, dim)
