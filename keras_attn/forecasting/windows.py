"""Calendar covariates and scaled windows of one series (DeepAR's input layout)."""

from collections.abc import Mapping

import numpy as np

from keras_attn._typing import Tensor


def calendar_covariates(timestamps: Tensor) -> dict[str, np.ndarray]:
    """Hour of day and day of week of hourly time stamps.

    Args:
        timestamps: array of `datetime64` stamps (any unit down to hours).

    Returns:
        dict with `"hour_of_day"` (0-23) and `"day_of_week"` (0 = Monday)
        int32 arrays of the same shape, the integer inputs of
        `keras_attn.models.build_logsparse_forecaster`.

    Example:

    >>> stamps = np.array(["2024-01-01T05", "2024-01-02T23"], "datetime64[h]")
    >>> {key: value.tolist() for key, value in calendar_covariates(stamps).items()}
    {'hour_of_day': [5, 23], 'day_of_week': [0, 1]}
    """
    hours = np.asarray(timestamps).astype("datetime64[h]").astype(np.int64)
    return {
        "hour_of_day": (hours % 24).astype("int32"),
        # 1970-01-01 was a Thursday (3).
        "day_of_week": ((hours // 24 + 3) % 7).astype("int32"),
    }


def make_windows(
    values: Tensor, covariates: Mapping[str, Tensor], starts: Tensor, context: int, horizon: int
) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """Model inputs, scaled targets and scales of windows `[s, s + context + horizon)`.

    The input at step `t` is the previous value `z[t - 1]` (the lagged
    target), so every start must be at least 1. Each window is divided by its
    scale, the mean absolute value of its `context` conditioning steps (known
    at forecast time), as in DeepAR; `1e-8` is added so that an all-zero
    context does not divide by zero.

    Args:
        values: `(T,)` the series.
        covariates: dict `name -> (T,)` array, each sliced like the values.
        starts: `(n,)` int, the first step of each window, in `[1, T - length]`.
        context: int, conditioning steps of each window.
        horizon: int, forecast steps after the context.

    Returns:
        `(inputs, targets, scales)`: `inputs` is a dict with
        `"lagged_target"` `(n, length, 1)` float32 and each covariate
        `(n, length)`; `targets` is `(n, length)` float32, the scaled values;
        `scales` is `(n,)` float64. `length = context + horizon`.

    Example:

    >>> values = np.arange(1.0, 11.0)
    >>> inputs, targets, scales = make_windows(values, {}, [2], context=2, horizon=1)
    >>> scales.round(4).tolist(), (targets * 3.5).round(4).tolist()
    ([3.5], [[3.0, 4.0, 5.0]])
    >>> lagged = inputs["lagged_target"]
    >>> (lagged[:, :, 0] * 3.5).round(4).tolist()
    [[2.0, 3.0, 4.0]]
    """
    starts = np.asarray(starts)
    if starts.size and starts.min() < 1:
        raise ValueError(
            f"Every window start must be >= 1 (the first input is the value before it). "
            f"Received: starts with minimum {int(starts.min())}"
        )
    steps = starts[:, None] + np.arange(context + horizon)[None, :]  # (n, length)
    scales = np.abs(values[steps[:, :context]]).mean(axis=1) + 1e-8  # (n,)
    targets = values[steps] / scales[:, None]  # (n, length)
    lagged = values[steps - 1] / scales[:, None]  # (n, length)
    inputs = {"lagged_target": lagged[..., None].astype("float32")}  # (n, length, 1)
    inputs.update({key: column[steps] for key, column in covariates.items()})
    return inputs, targets.astype("float32"), scales
