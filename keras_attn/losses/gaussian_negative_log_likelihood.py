"""Gaussian negative log-likelihood for probabilistic forecasting.

Paper: Li et al., "Enhancing the Locality and Breaking the Memory Bottleneck
of Transformer on Time Series Forecasting", NeurIPS 2019.
"""

import math

import keras
from keras import ops

from keras_attn._typing import Tensor

HALF_LOG_TWO_PI = 0.5 * math.log(2.0 * math.pi)


@keras.saving.register_keras_serializable(package="keras_attn")
class GaussianNegativeLogLikelihood(keras.losses.Loss):
    """Negative log-likelihood of targets under predicted Gaussians.

    `-log N(y | mu, sigma) = log sigma + log(2 pi) / 2 + (y - mu)^2 / (2 sigma^2)`,
    computed in float32 for every target and averaged by the reduction.

    Args:
        reduction: Keras loss reduction. Defaults to `"sum_over_batch_size"`.
        name: name of the loss.
        dtype: dtype of the loss computation.

    Call arguments:
        y_true: `(...)` or `(..., 1)` targets.
        y_pred: `(..., 2)`: the mean in `[..., 0]`, the standard deviation
            (positive) in `[..., 1]`, as given by `GaussianHead`.
        sample_weight: optional weights broadcastable to `(...)`.

    Returns:
        The reduced loss.

    Example:

    >>> loss = GaussianNegativeLogLikelihood()
    >>> round(float(loss(np.zeros((1, 1)), np.array([[[0.0, 1.0]]]))), 4)  # log(2 pi) / 2
    0.9189

    References:
        - [Li et al., 2019](https://arxiv.org/abs/1907.00235)
    """

    def __init__(
        self,
        reduction: str | None = "sum_over_batch_size",
        name: str = "gaussian_negative_log_likelihood",
        dtype: str | keras.DTypePolicy | None = None,
    ):
        super().__init__(name=name, reduction=reduction, dtype=dtype)

    def call(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        y_pred = ops.cast(y_pred, "float32")
        # (...): drops a trailing target axis of size 1.
        y_true = ops.reshape(ops.cast(y_true, "float32"), ops.shape(y_pred)[:-1])
        mean, scale = y_pred[..., 0], y_pred[..., 1]
        standardized = (y_true - mean) / scale
        return ops.log(scale) + HALF_LOG_TWO_PI + 0.5 * ops.square(standardized)
