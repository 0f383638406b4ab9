"""The attention speed benchmark runs at a tiny size, computes its ratios and draws them."""

import keras
import pytest

pytestmark = pytest.mark.backend_agnostic


def test_attention_speed_rows_time_every_step_and_give_the_ratios(load_benchmark):
    attention_speed = load_benchmark("attention_speed")
    rows = attention_speed.measure([16, 24], rounds=1, heads=2, head_dim=4, max_dense_reference=16)
    assert [row["length"] for row in rows] == [16, 24]
    for row in rows:
        seconds = row["seconds"]
        assert row["backend"] == keras.backend.backend()
        assert all(s > 0 for s in seconds.values())
        assert row["causal_over_logsparse"] == seconds["causal"] / seconds["logsparse"]
        assert row["reference_over_native"] == seconds["logsparse_reference"] / seconds["logsparse"]
        assert row["causal_over_sdpa"] == seconds["causal"] / seconds["sdpa"]
    every_step = set(attention_speed.STEPS)
    assert set(rows[0]["seconds"]) == every_step
    assert set(rows[1]["seconds"]) == every_step - {"causal_reference"}  # past its limit


def test_attention_speed_layers_run_the_implementation_they_name(load_benchmark):
    attention_speed = load_benchmark("attention_speed")
    made = attention_speed.layers_of(8, 2, 4, max_dense_reference=8)
    assert {name: layer.implementation for name, layer in made.items()} == {
        "logsparse": "auto",
        "logsparse_reference": "reference",
        "causal": "auto",
        "causal_reference": "reference",
    }


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="Draws no tensor.")
def test_attention_speed_figure_has_a_panel_per_backend(load_benchmark, tmp_path):
    attention_speed = load_benchmark("attention_speed")
    seconds = {step: 0.001 * (n + 1) for n, step in enumerate(attention_speed.STEPS)}
    rows = [
        {"backend": backend, "length": length, "seconds": seconds}
        for backend in ("torch", "tensorflow")
        for length in (256, 1024)
    ]
    rows.append({"backend": "jax", "error": "stopped"})
    settings = {"heads": 4, "head_dim": 16, "rounds": 7}
    shown = attention_speed.figure({"settings": settings, "rows": rows})
    assert [axis.get_title() for axis in shown.axes] == ["torch", "tensorflow"]
    assert [len(axis.get_lines()) for axis in shown.axes] == [5, 5]
    attention_speed.save_figure(shown, tmp_path / "speed.png")
    assert (tmp_path / "speed.png").stat().st_size > 1000
