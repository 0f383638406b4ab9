"""Transformer token layer of Tokens-to-Token ViT (T2T-ViT_t).

Yuan et al., "Tokens-to-Token ViT: Training Vision Transformers from Scratch
on ImageNet", ICCV 2021 (https://arxiv.org/abs/2101.11986).
"""

import keras

from keras_attn._typing import Tensor
from keras_attn.layers._activations import gelu
from keras_attn.layers._config import argument_config
from keras_attn.layers._layer_norm import layer_norm
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.utils.validation import (
    check_int,
    check_positive,
    check_rate,
    feature_spec,
    renamed_config,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class TokenTransformer(keras.layers.Layer):
    """One-head transformer layer that changes the token size (T2T-ViT_t).

    `y = v + attn(LN(x))`, then `y + mlp(LN(y))`. The attention maps the
    `dim` input features to `token_dim`: query, key and value projections
    without bias, an output projection with bias (the library's attention
    core, `output_dim=token_dim`). Because input and output sizes differ,
    the residual goes through the value `v = LN(x) W_v` instead of `x`.
    The MLP is `token_dim -> intermediate_dim -> token_dim` with GELU.
    As in the official code, the attention logits are scaled by
    `1 / sqrt(dim)` (the input size), not `1 / sqrt(token_dim)` (the core's
    `qk_scale`).

    Args:
        token_dim: int, output size (64 in the paper).
        intermediate_dim: int, hidden size of the MLP. Defaults to
            `token_dim` (the official code's MLP ratio of 1).
        dropout: float, dropout after the attention and in the MLP.
        layer_norm_epsilon: float, epsilon of the two layer norms.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, length, dim)`.
        training: bool, whether dropout is active.

    Returns:
        `(batch, length, token_dim)`.

    Example:

    >>> TokenTransformer(token_dim=64)(np.zeros((2, 49, 147))).shape
    (2, 49, 64)

    References:
        - [Yuan et al., 2021](https://arxiv.org/abs/2101.11986)
    """

    def __init__(
        self,
        token_dim: int = 64,
        intermediate_dim: int | None = None,
        dropout: float = 0.0,
        layer_norm_epsilon: float = 1e-5,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.token_dim = check_int("token_dim", token_dim)
        self.intermediate_dim = check_int(
            "intermediate_dim", self.token_dim if intermediate_dim is None else intermediate_dim
        )
        self.dropout = check_rate("dropout", dropout)
        self.layer_norm_epsilon = check_positive("layer_norm_epsilon", layer_norm_epsilon)

    def build(self, input_shape):
        self.input_spec = feature_spec(input_shape)
        output_shape = (*input_shape[:-1], self.token_dim)
        self.attention_norm = layer_norm(
            "attention_norm", self.layer_norm_epsilon, self.dtype_policy
        )
        self.attention = MultiHeadSelfAttention(
            num_heads=1,
            key_dim=self.token_dim,
            output_dim=self.token_dim,
            use_bias=False,
            output_use_bias=True,
            # The official scale: one over the square root of the input size.
            qk_scale=float(input_shape[-1]) ** -0.5,
            dtype=self.dtype_policy,
            name="attention",
        )
        self.mlp_norm = layer_norm("mlp_norm", self.layer_norm_epsilon, self.dtype_policy)
        self.mlp_hidden = keras.layers.Dense(
            self.intermediate_dim, activation=gelu, dtype=self.dtype_policy, name="mlp_hidden"
        )
        self.mlp_output = keras.layers.Dense(
            self.token_dim, dtype=self.dtype_policy, name="mlp_output"
        )
        self.dropout_layer = keras.layers.Dropout(self.dropout, dtype=self.dtype_policy)
        self.attention_norm.build(input_shape)
        self.attention.build(input_shape)
        self.mlp_norm.build(output_shape)
        self.mlp_hidden.build(output_shape)
        self.mlp_output.build((*input_shape[:-1], self.intermediate_dim))

    def call(self, inputs: Tensor, training: bool | None = None) -> Tensor:
        x = self.attention_norm(inputs)
        # The skip value; the core projects the same value inside, and XLA
        # merges the two identical products.
        value = self.attention.value_dense(x)[:, :, 0, :]  # (batch, length, token_dim)
        attended = self.dropout_layer(self.attention(x, training=training), training=training)
        y = value + attended  # (batch, length, token_dim)
        hidden = self.dropout_layer(self.mlp_hidden(self.mlp_norm(y)), training=training)
        return y + self.dropout_layer(self.mlp_output(hidden), training=training)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.token_dim)

    def get_config(self):
        arguments = ("token_dim", "intermediate_dim", "dropout", "layer_norm_epsilon")
        return {**super().get_config(), **argument_config(self, arguments)}

    @classmethod
    def from_config(cls, config):
        # Configs saved before the rename give the MLP as `mlp_ratio`, a
        # multiple of `token_dim`.
        if "mlp_ratio" in config:
            config = {**config, "mlp_ratio": int(config["token_dim"] * config["mlp_ratio"])}
        return super().from_config(renamed_config(config, {"mlp_ratio": "intermediate_dim"}))
