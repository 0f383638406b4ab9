"""Timing calls the same way in every benchmark and reproduction."""

import itertools
import math
import time
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from keras_attn._typing import Tensor


def median_seconds(
    calls: dict[str, Callable[[], Any]] | Sequence[Callable[[], Any]],
    repeats: int,
    warmup: int = 1,
    slow_s: float | None = None,
    min_seconds: float = 0.0,
    max_rounds: int = 400,
) -> dict[str, float] | list[float]:
    """Median wall-clock seconds of each call, timed in interleaved rounds.

    Each call first runs `warmup` times untimed (tracing and compilation).
    Then every round times each call once, in turn, so that a change of the
    machine's load during the measurement affects all calls alike; the order
    reverses from one round to the next, so that no call always follows the
    same one. A call's
    result is converted to NumPy inside the timed region (every output, any
    nesting), so that asynchronous backends have finished the work.

    Args:
        calls: a dict `name -> callable` or a list of callables, each taking
            no argument.
        repeats: int >= 1, timed rounds.
        warmup: int >= 0, untimed runs of each call before the rounds.
        slow_s: optional float. A call whose first warm-up run takes longer
            than `slow_s` seconds is not run again: its time is that of the
            first run (for calls so slow that repeating them costs minutes).
        min_seconds: float >= 0. More rounds than `repeats` for short calls:
            enough that the slowest call of the first round would run for
            `min_seconds` in all.
        max_rounds: int, the most rounds that `min_seconds` may ask for.

    Returns:
        The median seconds of each call, a dict with the keys of `calls` or
        a list in its order.

    Example:

    >>> times = median_seconds({"sum": lambda: np.ones(1000).sum()}, repeats=3)
    >>> list(times), times["sum"] < 1.0
    (['sum'], True)
    """
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"`repeats` must be an integer >= 1. Received: repeats={repeats!r}")
    named = dict(calls) if isinstance(calls, dict) else dict(enumerate(calls))
    seconds, timed = {}, []
    for name, call in named.items():
        for run in range(warmup):
            first = _timed(call)
            if run == 0 and slow_s is not None and first > slow_s:
                seconds[name] = first
                break
        else:
            timed.append(name)
    rounds = {name: [] for name in timed}
    count, index = repeats, 0
    while index < count:
        for name in timed if index % 2 == 0 else reversed(timed):
            rounds[name].append(_timed(named[name]))
        if index == 0 and min_seconds > 0 and timed:
            slowest = max(rounds[name][0] for name in timed)
            wanted = math.ceil(min_seconds / max(slowest, 1e-9))
            count = max(repeats, min(max_rounds, wanted))
        index += 1
    seconds.update({name: float(np.median(values)) for name, values in rounds.items()})
    if isinstance(calls, dict):
        return {name: seconds[name] for name in named}
    return [seconds[index] for index in range(len(named))]


def batch_latency_ms(
    predictors: dict[str, Callable[[Tensor], Any]], images: Tensor, batch_size: int, repeats: int
) -> dict[str, float]:
    """Median milliseconds per batch of each predictor, with `median_seconds`.

    The predictors take turns in interleaved rounds after one warm-up call
    each; in every round all of them get the same batch of `batch_size`
    images, the next one of `images` (wrapping around), so that inputs whose
    cost depends on their content are spread alike over the predictors.

    Args:
        predictors: dict `name -> callable` of one batch of images.
        images: numpy array, at least `batch_size` images.
        batch_size: int >= 1, images per call.
        repeats: int >= 1, timed rounds.

    Returns:
        dict `name -> float`, the median milliseconds per call.

    Example:

    >>> images = np.zeros((10, 4))
    >>> times = batch_latency_ms({"sum": lambda batch: batch.sum()}, images, 2, repeats=3)
    >>> list(times)
    ['sum']
    """
    if not 1 <= batch_size <= len(images):
        raise ValueError(
            f"`batch_size` must be between 1 and the {len(images)} images. "
            f"Received: batch_size={batch_size!r}"
        )
    starts = range(0, len(images) - batch_size + 1, batch_size)
    calls = {
        name: _cycling(predict, images, starts, batch_size) for name, predict in predictors.items()
    }
    seconds = median_seconds(calls, repeats)
    return {name: 1e3 * value for name, value in seconds.items()}


def _cycling(predict, images, starts, batch_size):
    batches = itertools.cycle(starts)

    def call():
        start = next(batches)
        return predict(images[start : start + batch_size])

    return call


def _timed(call):
    start = time.perf_counter()
    _to_numpy(call())
    return time.perf_counter() - start


def _to_numpy(outputs):
    if outputs is None:
        return None
    import keras

    return keras.tree.map_structure(keras.ops.convert_to_numpy, outputs)
