import numpy as np
import pytest

from keras_attn.utils import median_seconds, timing


class _Clock:
    """A fake `perf_counter`: each call of a timed function advances it by its next duration."""

    def __init__(self):
        self.now, self.order = 0.0, []

    def call(self, name, durations):
        durations = iter(durations)

        def run():
            self.order.append(name)
            self.now += next(durations)
            return np.zeros(2)

        return run


@pytest.fixture
def clock(monkeypatch):
    clock = _Clock()
    monkeypatch.setattr(timing.time, "perf_counter", lambda: clock.now)
    return clock


def test_median_of_interleaved_rounds_after_warmup(clock):
    calls = {
        "a": clock.call("a", [50.0, 1.0, 3.0, 2.0]),
        "b": clock.call("b", [9.0, 4.0, 4.0, 7.0]),
    }
    assert median_seconds(calls, repeats=3) == {"a": 2.0, "b": 4.0}  # the warm-up run is not timed
    # Warm-up a, b; then the order reverses from one round to the next.
    assert clock.order == ["a", "b", "a", "b", "b", "a", "a", "b"]
    listed = [clock.call("x", [0.0, 5.0]), clock.call("y", [0.0, 6.0])]
    assert median_seconds(listed, repeats=1) == [5.0, 6.0]


def test_a_slow_call_is_timed_once(clock):
    calls = {"slow": clock.call("slow", [30.0]), "quick": clock.call("quick", [1.0, 2.0, 2.0])}
    assert median_seconds(calls, repeats=2, slow_s=10.0) == {"slow": 30.0, "quick": 2.0}
    assert clock.order.count("slow") == 1


def test_outputs_are_converted_inside_the_timed_region(clock, monkeypatch):
    converted = []
    monkeypatch.setattr(timing, "_to_numpy", lambda outputs: converted.append(clock.now))
    median_seconds([clock.call("a", [1.0, 1.0])], repeats=1, warmup=1)
    assert converted == [1.0, 2.0]  # after each run, before the clock is read again


def test_min_seconds_adds_rounds_for_short_calls(clock):
    # First round: the slower call takes 0.5 s, so 2 s need 4 rounds.
    calls = {"a": clock.call("a", [9.0, 0.5, 1, 2, 3, 9]), "b": clock.call("b", [9.0] + [0.25] * 5)}
    assert median_seconds(calls, repeats=2, min_seconds=2.0) == {"a": 1.5, "b": 0.25}
    assert clock.order.count("a") == 5  # one warm-up and four rounds
    capped = {"c": clock.call("c", [1.0] + [0.25] * 10)}
    median_seconds(capped, repeats=1, min_seconds=100.0, max_rounds=6)
    assert clock.order.count("c") == 7


def test_bad_repeats():
    with pytest.raises(ValueError, match="Received: repeats=0"):
        median_seconds([lambda: None], repeats=0)


def test_batch_latency_gives_every_predictor_the_same_batch_per_round(clock):
    images = np.arange(10)[:, None]  # five batches of two
    seen = {"a": [], "b": []}

    def predictor(name, cost):
        def predict(batch):
            seen[name].append(batch[:, 0].tolist())
            clock.now += cost * (1 + batch[0, 0])
            return batch

        return predict

    times = timing.batch_latency_ms(
        {"a": predictor("a", 1.0), "b": predictor("b", 2.0)}, images, 2, repeats=6
    )
    assert seen["a"] == seen["b"]
    assert seen["a"][:6] == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [0, 1]]
    # The rounds time the batches starting at 2, 4, 6, 8, 0, 2 (after the warm-up at 0):
    # costs 3, 5, 7, 9, 1, 3 seconds for "a", twice that for "b"; medians 4 and 8.
    assert times == {"a": 4e3, "b": 8e3}
    with pytest.raises(ValueError, match="Received: batch_size=11"):
        timing.batch_latency_ms({"a": predictor("a", 1.0)}, images, 11, repeats=1)
