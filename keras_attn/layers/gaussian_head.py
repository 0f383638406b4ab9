"""Gaussian output head for probabilistic forecasting.

Paper: Li et al., "Enhancing the Locality and Breaking the Memory Bottleneck
of Transformer on Time Series Forecasting", NeurIPS 2019 (the likelihood
head follows DeepAR, Salinas et al., 2020).
"""

import keras
from keras import ops

from keras_attn._typing import Initializer, Tensor
from keras_attn.layers._config import argument_config
from keras_attn.utils.validation import check_positive, feature_spec


@keras.saving.register_keras_serializable(package="keras_attn")
class GaussianHead(keras.layers.Layer):
    """Maps features to the mean and scale of a Gaussian at every position.

    A dense layer gives two numbers per position: the mean `mu` and a raw
    scale `s`, turned positive by `sigma = softplus(s) + min_scale`.

    Args:
        min_scale: float > 0 added to the softplus, a floor that keeps the
            negative log-likelihood finite (with 0, an underflowing softplus
            gives a zero scale and an infinite loss).
        kernel_initializer: initializer of the dense kernel.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(..., features)`.

    Returns:
        `(..., 2)`: `[..., 0]` is the mean, `[..., 1]` the standard deviation.
        `GaussianNegativeLogLikelihood` and `RhoRisk` read this layout.

    Example:

    >>> head = GaussianHead()
    >>> params = head(np.ones((3, 24, 8)))
    >>> params.shape, bool(keras.ops.all(params[..., 1] > 0))
    ((3, 24, 2), True)

    References:
        - [Li et al., 2019](https://arxiv.org/abs/1907.00235)
        - [Salinas et al., 2020](https://arxiv.org/abs/1704.04110)
    """

    def __init__(
        self,
        min_scale: float = 1e-6,
        kernel_initializer: Initializer = "glorot_uniform",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.min_scale = check_positive("min_scale", min_scale)
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.supports_masking = True

    def build(self, input_shape):
        self.input_spec = feature_spec(input_shape, any_rank=True)
        self.dense = keras.layers.Dense(
            2, kernel_initializer=self.kernel_initializer, dtype=self.dtype_policy, name="dense"
        )
        self.dense.build(input_shape)

    def call(self, inputs: Tensor) -> Tensor:
        raw = self.dense(inputs)  # (..., 2)
        mean, raw_scale = raw[..., :1], raw[..., 1:]
        scale = ops.softplus(raw_scale) + ops.cast(self.min_scale, raw.dtype)
        return ops.concatenate([mean, scale], axis=-1)  # (..., 2)

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], 2)

    def get_config(self):
        arguments = ("min_scale", "kernel_initializer")
        return {**super().get_config(), **argument_config(self, arguments)}
