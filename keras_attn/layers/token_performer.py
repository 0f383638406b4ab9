"""Performer token layer of Tokens-to-Token ViT (T2T-ViT).

Yuan et al., "Tokens-to-Token ViT: Training Vision Transformers from Scratch
on ImageNet", ICCV 2021 (https://arxiv.org/abs/2101.11986), with the
positive random-feature attention of Choromanski et al., "Rethinking
Attention with Performers", ICLR 2021 (https://arxiv.org/abs/2009.14794).
"""

import math

import keras
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.layers._activations import gelu
from keras_attn.layers._config import argument_config
from keras_attn.layers._layer_norm import layer_norm
from keras_attn.utils.validation import (
    check_int,
    check_optional_int,
    check_positive,
    check_rate,
    feature_spec,
)

# Added to the normaliser of the linear attention, as in the official code.
NORMALISER_EPSILON = 1e-8


@keras.saving.register_keras_serializable(package="keras_attn")
class TokenPerformer(keras.layers.Layer):
    """One-head Performer layer that changes the token size (T2T-ViT).

    With `x' = LN(x)` and `[k, q, v] = x' W + b` (one Dense to
    `3 * token_dim`, split in the official order key, query, value), the
    softmax kernel is replaced by positive random features
    `phi(u) = exp(w u - |u|^2 / 2) / sqrt(m)` with `m = token_dim *
    kernel_ratio` fixed orthogonal rows `w` of norm `sqrt(m)`
    (a non-trainable weight). Attention is linear in the length:
    `attn = phi(q) (phi(k)^T v) / (phi(q) . sum_t phi(k_t) + 1e-8)`,
    computed in float32. Then `y = v + dropout(proj(attn))` (the skip
    goes through `v` because the sizes differ) and
    `y + mlp(LN(y))`, a `token_dim -> token_dim -> token_dim` GELU MLP.
    Unlike the core attention there are no per-query logits, so this is a
    separate layer.

    Args:
        token_dim: int, output size (64 in the paper).
        kernel_ratio: float, number of random features as a fraction of
            `token_dim` (0.5 in the paper).
        dropout: float, dropout after the projection and the MLP (0.1 in
            the official code).
        layer_norm_epsilon: float, epsilon of the two layer norms.
        seed: int, seed of the random features and of dropout.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, length, dim)`.
        training: bool, whether dropout is active.

    Returns:
        `(batch, length, token_dim)`.

    Example:

    >>> TokenPerformer(token_dim=64)(np.zeros((2, 49, 147))).shape
    (2, 49, 64)

    References:
        - [Yuan et al., 2021](https://arxiv.org/abs/2101.11986)
        - [Choromanski et al., 2021](https://arxiv.org/abs/2009.14794)
    """

    def __init__(
        self,
        token_dim: int = 64,
        kernel_ratio: float = 0.5,
        dropout: float = 0.1,
        layer_norm_epsilon: float = 1e-5,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.token_dim = check_int("token_dim", token_dim)
        self.kernel_ratio = check_positive("kernel_ratio", kernel_ratio)
        self.num_features = int(self.token_dim * self.kernel_ratio)
        if self.num_features < 1:
            raise ValueError(
                "`kernel_ratio` must give at least one random feature. "
                f"Received: kernel_ratio={kernel_ratio}"
            )
        self.dropout = check_rate("dropout", dropout)
        self.layer_norm_epsilon = check_positive("layer_norm_epsilon", layer_norm_epsilon)
        self.seed = check_optional_int("seed", seed, minimum=0)

    def build(self, input_shape):
        self.input_spec = feature_spec(input_shape)
        output_shape = (*input_shape[:-1], self.token_dim)
        self.attention_norm = layer_norm(
            "attention_norm", self.layer_norm_epsilon, self.dtype_policy
        )
        self.key_query_value = keras.layers.Dense(
            3 * self.token_dim, dtype=self.dtype_policy, name="key_query_value"
        )
        self.projection = keras.layers.Dense(
            self.token_dim, dtype=self.dtype_policy, name="projection"
        )
        self.mlp_norm = layer_norm("mlp_norm", self.layer_norm_epsilon, self.dtype_policy)
        self.mlp_hidden = keras.layers.Dense(
            self.token_dim, activation=gelu, dtype=self.dtype_policy, name="mlp_hidden"
        )
        self.mlp_output = keras.layers.Dense(
            self.token_dim, dtype=self.dtype_policy, name="mlp_output"
        )
        self.dropout_layer = keras.layers.Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy
        )
        self.random_features = self.add_weight(
            name="random_features",
            shape=(self.num_features, self.token_dim),
            initializer=keras.initializers.Orthogonal(
                gain=math.sqrt(self.num_features), seed=self.seed
            ),
            trainable=False,
            dtype="float32",
            autocast=False,  # the features stay float32 under mixed precision
        )
        self.attention_norm.build(input_shape)
        self.key_query_value.build(input_shape)
        for dense in (self.projection, self.mlp_hidden, self.mlp_output):
            dense.build(output_shape)
        self.mlp_norm.build(output_shape)

    def positive_features(self, x: Tensor) -> Tensor:
        """`exp(w x - |x|^2 / 2) / sqrt(m)` in float32, `(batch, length, m)`."""
        x = ops.cast(x, "float32")
        projected = ops.einsum("btd,md->btm", x, self.random_features)  # (batch, length, m)
        half_norm = ops.sum(x * x, axis=-1, keepdims=True) / 2.0  # (batch, length, 1)
        return ops.exp(projected - half_norm) / math.sqrt(self.num_features)

    def call(self, inputs: Tensor, training: bool | None = None) -> Tensor:
        key, query, value = ops.split(self.key_query_value(self.attention_norm(inputs)), 3, -1)
        key_features = self.positive_features(key)  # (batch, length, m)
        query_features = self.positive_features(query)  # (batch, length, m)
        key_sum = ops.sum(key_features, axis=1)  # (batch, m)
        normaliser = ops.einsum("btm,bm->bt", query_features, key_sum)[..., None]  # (batch, L, 1)
        key_value = ops.einsum(
            "btn,btm->bnm", ops.cast(value, "float32"), key_features
        )  # (batch, token_dim, m)
        attended = ops.einsum("btm,bnm->btn", query_features, key_value)  # (batch, L, token_dim)
        attended = ops.cast(attended / (normaliser + NORMALISER_EPSILON), self.compute_dtype)
        y = value + self.dropout_layer(self.projection(attended), training=training)
        hidden = self.mlp_hidden(self.mlp_norm(y))  # (batch, length, token_dim)
        return y + self.dropout_layer(self.mlp_output(hidden), training=training)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.token_dim)

    def get_config(self):
        arguments = ("token_dim", "kernel_ratio", "dropout", "layer_norm_epsilon", "seed")
        return {**super().get_config(), **argument_config(self, arguments)}
