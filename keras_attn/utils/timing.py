"""Timing calls the same way in every benchmark and reproduction."""

import math
import time

import numpy as np


def median_seconds(calls, repeats, warmup=1, slow_s=None, min_seconds=0.0, max_rounds=400):
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


def _timed(call):
    start = time.perf_counter()
    _to_numpy(call())
    return time.perf_counter() - start


def _to_numpy(outputs):
    if outputs is None:
        return None
    import keras

    return keras.tree.map_structure(keras.ops.convert_to_numpy, outputs)
