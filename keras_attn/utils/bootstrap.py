"""Bootstrap intervals of a mean over examples."""

import numpy as np

from keras_attn._typing import Tensor


def bootstrap_interval(
    values: Tensor, resamples: int = 2000, confidence: float = 0.95, seed: int = 0
) -> tuple[float, float] | tuple[np.ndarray, np.ndarray]:
    """Percentile bootstrap interval of the mean of `values` over its first axis.

    The examples (rows) are drawn with replacement `resamples` times; the
    interval is given by the percentiles of the resampled means. Passing
    per-example differences of two paired measurements (the same examples
    under two models) gives the interval of the mean difference.

    Args:
        values: `(examples, ...)` array, for example per-example correctness
            (0/1) or losses.
        resamples: int >= 1, bootstrap resamples.
        confidence: float in (0, 1), coverage of the interval.
        seed: int, seed of the resampling.

    Returns:
        `(low, high)` arrays of shape `values.shape[1:]` (floats for a 1-D
        `values`).

    Example:

    >>> low, high = bootstrap_interval(np.array([0, 1, 1, 1, 0, 1, 1, 0]), seed=1)
    >>> bool(low < 0.625 < high)
    True
    """
    values = np.asarray(values, dtype=np.float64)
    if values.ndim == 0 or len(values) == 0:
        raise ValueError(
            f"`values` must have at least one example along its first axis. "
            f"Received: values with shape {values.shape}"
        )
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 1:
        raise ValueError(f"`resamples` must be an integer >= 1. Received: resamples={resamples!r}")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"`confidence` must be in (0, 1). Received: confidence={confidence!r}")
    rng = np.random.default_rng(seed)
    count = len(values)
    flat = values.reshape(count, -1)  # (examples, statistics)
    means = np.stack(
        [flat[rng.integers(0, count, size=count)].mean(axis=0) for _ in range(resamples)]
    )  # (resamples, statistics)
    tail = 100 * (1 - confidence) / 2
    low, high = np.percentile(means, [tail, 100 - tail], axis=0)
    shape = values.shape[1:]
    if not shape:
        return float(low[0]), float(high[0])
    return low.reshape(shape), high.reshape(shape)
