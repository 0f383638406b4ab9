"""The attention speed benchmark runs at a tiny size and computes its ratios."""

import keras
import pytest

pytestmark = pytest.mark.backend_agnostic


def test_attention_speed_rows_time_every_step_and_give_the_ratios(load_benchmark):
    attention_speed = load_benchmark("attention_speed")
    rows = attention_speed.measure([16, 24], rounds=1, heads=2, head_dim=4)
    assert [row["length"] for row in rows] == [16, 24]
    for row in rows:
        seconds = row["seconds"]
        assert row["backend"] == keras.backend.backend()
        assert sorted(seconds) == ["causal", "logsparse", "sdpa"]
        assert all(s > 0 for s in seconds.values())
        assert row["causal_over_logsparse"] == seconds["causal"] / seconds["logsparse"]
        assert row["causal_over_sdpa"] == seconds["causal"] / seconds["sdpa"]
