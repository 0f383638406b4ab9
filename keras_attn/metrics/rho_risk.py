"""The rho-risk (normalised quantile loss) of probabilistic forecasts.

Paper: Li et al., "Enhancing the Locality and Breaking the Memory Bottleneck
of Transformer on Time Series Forecasting", NeurIPS 2019.
"""

import statistics

import keras
from keras import ops

from keras_attn._typing import Tensor


@keras.saving.register_keras_serializable(package="keras_attn")
class RhoRisk(keras.metrics.Metric):
    """rho-risk `R_rho = 2 sum D_rho(x, x_hat) / sum |x|` over all targets.

    `D_rho(x, x_hat) = (rho - 1{x <= x_hat}) (x - x_hat)` is the quantile
    (pinball) loss of the forecast rho-quantile `x_hat`, read from the
    predicted Gaussian: `x_hat = mu + sigma * Phi^-1(rho)` (the mean for
    rho = 0.5). Both sums run over every target seen since the last reset,
    so the metric is a ratio of totals, not a mean of per-batch ratios.
    R0.5 is the normalised absolute error of the median.

    Args:
        rho: float in (0, 1), the quantile level.
        name: metric name. Defaults to `"R<rho>"`, for example `"R0.9"`.
        dtype: dtype of the metric state.

    Call arguments (`update_state`):
        y_true: `(...)` or `(..., 1)` targets.
        y_pred: `(..., 2)`: mean and standard deviation (`GaussianHead`). A
            point forecast is a Gaussian with standard deviation 0.
        sample_weight: optional weights broadcastable to `(...)`, applied to
            both sums (0 leaves a target out).

    Returns:
        The rho-risk, a scalar.

    Example:

    >>> metric = RhoRisk(0.9)
    >>> metric.update_state(np.array([2.0, 4.0]), np.array([[1.0, 0.0], [5.0, 0.0]]))
    >>> round(float(metric.result()), 4)  # 2 * (0.9 * 1 + 0.1 * 1) / 6
    0.3333

    References:
        - [Li et al., 2019](https://arxiv.org/abs/1907.00235)
        - [Salinas et al., 2020](https://arxiv.org/abs/1704.04110)
    """

    def __init__(
        self,
        rho: float = 0.5,
        name: str | None = None,
        dtype: str | keras.DTypePolicy | None = None,
    ):
        if isinstance(rho, bool) or not isinstance(rho, (int, float)) or not 0.0 < rho < 1.0:
            raise ValueError(f"`rho` must be in (0, 1). Received: rho={rho!r}")
        super().__init__(name=name or f"R{rho:g}", dtype=dtype)
        self.rho = float(rho)
        self.normal_quantile = statistics.NormalDist().inv_cdf(self.rho)
        self.total_loss = self.add_variable(shape=(), initializer="zeros", name="total_loss")
        self.total_target = self.add_variable(shape=(), initializer="zeros", name="total_target")

    def update_state(
        self, y_true: Tensor, y_pred: Tensor, sample_weight: Tensor | None = None
    ) -> None:
        y_pred = ops.cast(y_pred, self.dtype)
        # (...): drops a trailing target axis of size 1.
        y_true = ops.reshape(ops.cast(y_true, self.dtype), ops.shape(y_pred)[:-1])
        quantile = y_pred[..., 0] + self.normal_quantile * y_pred[..., 1]
        error = y_true - quantile
        below = ops.cast(y_true <= quantile, self.dtype)
        loss = (self.rho - below) * error  # D_rho, >= 0
        magnitude = ops.abs(y_true)
        if sample_weight is not None:
            weight = ops.broadcast_to(ops.cast(sample_weight, self.dtype), ops.shape(loss))
            loss, magnitude = loss * weight, magnitude * weight
        self.total_loss.assign_add(ops.sum(loss))
        self.total_target.assign_add(ops.sum(magnitude))

    def result(self) -> Tensor:
        return 2.0 * ops.divide_no_nan(self.total_loss, self.total_target)

    def reset_state(self) -> None:
        self.total_loss.assign(0.0)
        self.total_target.assign(0.0)

    def get_config(self):
        return {"rho": self.rho, "name": self.name, "dtype": self.dtype}
