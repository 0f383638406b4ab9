"""Scores of probabilistic forecasts and the seasonal-naive baseline."""

from collections.abc import Mapping, Sequence

import numpy as np

from keras_attn._typing import Tensor

Z90 = 1.2816
"""The standard-normal 90% quantile: `mean ± Z90 · scale` is the 10-90% band."""


def seasonal_naive(values: Tensor, origins: Tensor, horizon: int, season: int = 24) -> np.ndarray:
    """The value one season earlier, `z[origin + h - season]`, for each forecast step.

    Args:
        values: `(T,)` the series.
        origins: `(n,)` int, the first forecast step of each forecast.
        horizon: int, steps forecast from each origin.
        season: int, the season length in steps (24 for hourly data).

    Returns:
        `(n, horizon)` array.

    Example:

    >>> seasonal_naive(np.arange(10.0), [6], horizon=2, season=3).tolist()
    [[3.0, 4.0]]
    """
    steps = np.asarray(origins)[:, None] + np.arange(horizon)[None, :]  # (n, horizon)
    return values[steps - season]


def rho_risks(
    actual: Tensor, mean: Tensor, scale: Tensor, rhos: Sequence[float] = (0.5, 0.9)
) -> dict[str, float]:
    """The rho-risks of Gaussian forecasts, through the `RhoRisk` metric.

    Args:
        actual: `(...)` the true values.
        mean: `(...)` forecast means.
        scale: `(...)` forecast standard deviations; zeros give a point
            forecast (for example `seasonal_naive`).
        rhos: quantile levels.

    Returns:
        dict `"R<rho>" -> float`, for example `{"R0.5": ..., "R0.9": ...}`.

    Example:

    >>> rho_risks(np.array([2.0, 4.0]), np.array([1.0, 5.0]), np.zeros(2))
    {'R0.5': 0.3333333432674408, 'R0.9': 0.3333333432674408}
    """
    from keras_attn.metrics import RhoRisk

    params = np.stack([mean, scale], axis=-1)  # (..., 2)
    risks = {}
    for rho in rhos:
        metric = RhoRisk(rho)
        metric.update_state(actual, params)
        risks[f"R{rho:g}"] = float(metric.result())
    return risks


def quantile_risks(actual: Tensor, quantiles: Mapping[float, Tensor]) -> dict[str, float]:
    """The rho-risk of each quantile forecast, for example of sample paths.

    `R_rho = 2 sum D_rho(x, q_rho) / sum |x|` with the forecast
    `rho`-quantile `q_rho` as the point forecast, through `rho_risks` (the
    `RhoRisk` metric with zero scale).

    Args:
        actual: `(...)` the true values.
        quantiles: dict `rho -> (...)` forecast quantiles, as from
            `path_quantiles`.

    Returns:
        dict `"R<rho>" -> float`.

    Example:

    >>> quantile_risks(np.array([2.0, 4.0]), {0.5: np.array([1.0, 5.0])})
    {'R0.5': 0.3333333432674408}
    """
    risks = {}
    for rho, forecast in quantiles.items():
        risks.update(rho_risks(actual, forecast, np.zeros_like(forecast), rhos=(rho,)))
    return risks


def forecast_band(mean: Tensor, scale: Tensor, z: float = Z90) -> tuple[np.ndarray, np.ndarray]:
    """The band `mean ± z · scale` of Gaussian forecasts (10-90% by default).

    Args:
        mean: array of forecast means.
        scale: array of forecast standard deviations, the shape of `mean`.
        z: float, the standard-normal quantile of the band's upper edge.

    Returns:
        `(low, high)` arrays of the shape of `mean`.

    Example:

    >>> low, high = forecast_band(np.array([10.0]), np.array([2.0]))
    >>> low.round(4).tolist(), high.round(4).tolist()
    ([7.4368], [12.5632])
    """
    mean, scale = np.asarray(mean), np.asarray(scale)
    return mean - z * scale, mean + z * scale
