"""The BSARec training benchmark's smoke run measures both ways side by side."""

import json

import keras
import pytest


# Eight tiny trainings, each compiled once.
@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_small_run_times_the_former_and_the_new_way(tmp_path, load_benchmark):
    benchmark = load_benchmark("bsarec_training")
    options = ["--steps", "2", "--batch-size", "8", "--max-sequence-length", "6"]
    benchmark.main([*options, "--steps-per-execution", "2", "--out", str(tmp_path)])
    data = json.loads((tmp_path / "bsarec_training.json").read_text())
    assert data["meta"]["setting"] == "benchmark"
    rows = data["results"]["rows"]
    assert [(r["model"], r["way"], r["jit_compile"]) for r in rows] == [
        (model, way, jit)
        for model in ("SASRec", "BSARec")
        for way in ("former", "new")
        for jit in (False, True)
    ]
    assert all(r["sequences_per_s"] > 0 for r in rows)
    assert sorted(data["results"]["speedup"]) == ["BSARec", "SASRec"]
    assert data["results"]["config"]["train_samples"] == 12  # 2 users, 6 prefixes each
