"""Rolling autoregressive forecasts of a Gaussian-output model."""

import numpy as np

from keras_attn.forecasting.windows import make_windows


def autoregressive_forecast(model, values, covariates, origins, context, horizon):
    """Forecasts `horizon` steps from each origin, feeding predictions back.

    The `context` steps before each origin hold the true values, and the
    input of the first forecast step is the last of them. The model
    then runs `horizon` times on the whole window: after run `h` the
    predicted mean of step `origin + h` becomes the lagged input of step
    `origin + h + 1` (the mean path, a deterministic stand-in for DeepAR's
    sample paths). Inputs after the last known or predicted step are zero,
    and a causal model never reads them. All origins are forecast together,
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
    starts = np.asarray(origins) - context
    inputs, _, scales = make_windows(values, covariates, starts, context, horizon)
    lagged = inputs["lagged_target"]  # (n, length, 1)
    # Step `origin` reads the last true value z[origin - 1]; later inputs are unknown.
    lagged[:, context + 1 :] = 0.0
    for step in range(horizon):
        params = np.asarray(model.predict_on_batch(inputs))  # (n, length, 2)
        if step + 1 < horizon:
            lagged[:, context + step + 1, 0] = params[:, context + step, 0]
    mean = params[:, context:, 0] * scales[:, None]  # (n, horizon)
    scale = params[:, context:, 1] * scales[:, None]  # (n, horizon)
    return mean, scale
