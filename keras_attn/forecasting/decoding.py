"""Rolling autoregressive forecasts of a Gaussian-output model."""

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

import numpy as np

from keras_attn._typing import Tensor
from keras_attn.forecasting.windows import make_windows

if TYPE_CHECKING:
    import keras


def autoregressive_forecast(
    model: "keras.Model",
    values: Tensor,
    covariates: Mapping[str, Tensor],
    origins: Tensor,
    context: int,
    horizon: int,
) -> tuple[np.ndarray, np.ndarray]:
    """Forecasts `horizon` steps from each origin, feeding predictions back.

    The `context` steps before each origin hold the true values, and the
    input of the first forecast step is the last of them. The model
    then runs `horizon` times on the whole window: after run `h` the
    predicted mean of step `origin + h` becomes the lagged input of step
    `origin + h + 1` (the mean path, a deterministic stand-in for the
    sample paths of `sample_path_forecast`). Inputs after the last known or
    predicted step are zero, and a causal model never reads them. All origins are forecast together,
    one `predict_on_batch` per step.

    Args:
        model: a Keras model from the inputs of `make_windows` to
            `(batch, length, 2)` means and standard deviations of the scaled
            series.
        values: `(T,)` the series; only steps before each origin are read.
        covariates: dict `name -> (T,)` array, as for `make_windows`.
        origins: `(n,)` int, the first forecast step of each forecast;
            each must be more than `context` (and the window must end by `T`).
        context: int, conditioning steps before each origin.
        horizon: int, steps forecast from each origin.

    Returns:
        `(mean, scale)`, each `(n, horizon)`, in the units of `values`.

    Example:

    ```python
    mean, scale = autoregressive_forecast(model, values, covariates, [500, 524], 168, 24)
    ```
    """
    inputs, scales = _forecast_windows(values, covariates, origins, context, horizon)
    params, _ = _decode(model, inputs, context, horizon, lambda mean, scale: mean)
    mean = params[:, context:, 0] * scales[:, None]  # (n, horizon)
    scale = params[:, context:, 1] * scales[:, None]  # (n, horizon)
    return mean, scale


def sample_path_forecast(
    model: "keras.Model",
    values: Tensor,
    covariates: Mapping[str, Tensor],
    origins: Tensor,
    context: int,
    horizon: int,
    num_paths: int = 100,
    seed: int = 0,
) -> np.ndarray:
    """Forecasts by ancestral sampling: `num_paths` sample paths from each origin.

    As in DeepAR and the LogSparse paper: the input of the first forecast
    step is the last true value; at step `h` every path draws
    `z ~ Normal(mean, scale)` from the model's Gaussian at step `origin + h`,
    and that draw (not the mean) is the path's lagged input of step
    `origin + h + 1`. The paths of all origins run together, one
    `predict_on_batch` of `len(origins) * num_paths` windows per step.
    Quantiles of the paths (`path_quantiles`) are the forecast.

    Args:
        model: a Keras model from the inputs of `make_windows` to
            `(batch, length, 2)` means and standard deviations of the scaled
            series.
        values: `(T,)` the series; only steps before each origin are read.
        covariates: dict `name -> (T,)` array, as for `make_windows`.
        origins: `(n,)` int, the first forecast step of each forecast.
        context: int, conditioning steps before each origin.
        horizon: int, steps forecast from each origin.
        num_paths: int, sample paths per origin.
        seed: int, seed of the normal draws.

    Returns:
        `(n, num_paths, horizon)` array of sample paths in the units of
        `values`.

    Example:

    ```python
    paths = sample_path_forecast(model, values, covariates, [500, 524], 168, 24)
    quantiles = path_quantiles(paths, (0.5, 0.9))  # {0.5: (2, 24), 0.9: (2, 24)}
    ```
    """
    inputs, scales = _forecast_windows(values, covariates, origins, context, horizon, num_paths)
    rng = np.random.default_rng(seed)
    _, draws = _decode(
        model,
        inputs,
        context,
        horizon,
        lambda mean, scale: mean + scale * rng.standard_normal(len(mean)),
    )  # draws: (n * num_paths, horizon)
    paths = draws.reshape(len(scales), num_paths, horizon)  # (n, num_paths, horizon)
    return paths * scales[:, None, None]


def _forecast_windows(values, covariates, origins, context, horizon, repeats=1):
    """The windows of each origin (`repeats` copies each), inputs after the first step unknown."""
    starts = np.asarray(origins) - context
    inputs, _, scales = make_windows(values, covariates, starts, context, horizon)
    inputs = {key: np.repeat(value, repeats, axis=0) for key, value in inputs.items()}
    # Step `origin` reads the last true value z[origin - 1]; later inputs are unknown.
    inputs["lagged_target"][:, context + 1 :] = 0.0  # (n * repeats, length, 1)
    return inputs, scales


def _decode(model, inputs, context, horizon, next_input):
    """Runs `model` once per forecast step, feeding `next_input(mean, scale)` of each step back.

    Returns the last run's `(batch, length, 2)` outputs and the `(batch, horizon)`
    values fed back (the last step's too).
    """
    lagged = inputs["lagged_target"]  # (batch, length, 1)
    fed = np.empty((lagged.shape[0], horizon))  # (batch, horizon)
    for step in range(horizon):
        params = np.asarray(model.predict_on_batch(inputs))  # (batch, length, 2)
        fed[:, step] = next_input(params[:, context + step, 0], params[:, context + step, 1])
        if step + 1 < horizon:
            lagged[:, context + step + 1, 0] = fed[:, step]
    return params, fed


def path_quantiles(
    paths: Tensor, quantiles: Sequence[float] = (0.5, 0.9)
) -> dict[float, np.ndarray]:
    """Quantiles of sample paths at every forecast step.

    Args:
        paths: `(n, num_paths, horizon)` sample paths.
        quantiles: quantile levels in `(0, 1)`.

    Returns:
        dict `level -> (n, horizon)` array (linear interpolation between
        order statistics, NumPy's default).

    Example:

    >>> paths = np.arange(5.0).reshape(1, 5, 1)
    >>> {level: q.tolist() for level, q in path_quantiles(paths, (0.5, 0.75)).items()}
    {0.5: [[2.0]], 0.75: [[3.0]]}
    """
    return {level: np.quantile(paths, level, axis=1) for level in quantiles}
