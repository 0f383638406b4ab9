"""The BSARec training benchmark's smoke run measures every way side by side."""

import json

import keras
import pytest


# Twelve tiny trainings per round, each compiled once, and eight short ones for the losses.
@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_small_run_times_every_way_and_compares_the_losses(tmp_path, load_benchmark, capsys):
    benchmark = load_benchmark("bsarec_training")
    options = ["--steps", "2", "--batch-size", "8", "--max-sequence-length", "6"]
    benchmark.main(
        [
            *options,
            *("--steps-per-execution", "2", "--rounds", "3", "--trajectory-steps", "2"),
            *("--out", str(tmp_path)),
        ]
    )
    timed = [line for line in capsys.readouterr().out.splitlines() if line.startswith("round ")]
    # Interleaved: every row once in round 1, then every row in round 2, ...
    assert [line.split()[1] for line in timed] == [f"{r}/3" for r in (1, 2, 3) for _ in range(12)]
    data = json.loads((tmp_path / "bsarec_training.json").read_text())
    assert data["meta"]["setting"] == "benchmark"
    rows = data["results"]["rows"]
    assert [(r["model"], r["way"], r["jit_compile"]) for r in rows] == [
        (model, way, jit)
        for model in ("SASRec", "BSARec")
        for way in ("former", "fit_recommender", "last position")
        for jit in (False, True)
    ]
    for row in rows:  # the median of three interleaved rounds
        assert len(row["sequences_per_s_per_round"]) == 3
        assert row["sequences_per_s"] == sorted(row["sequences_per_s_per_round"])[1] > 0
    assert sorted(data["results"]["speedup"]) == ["BSARec", "SASRec"]
    assert sorted(data["results"]["speedup"]["BSARec"]) == ["fit_recommender", "last position"]
    gaps = data["results"]["trajectory"]
    assert [(g["model"], g["jit_compile"]) for g in gaps] == [
        (model, jit) for model in ("SASRec", "BSARec") for jit in (False, True)
    ]
    assert all(g["max_loss_difference"] < 1e-5 for g in gaps)
    assert data["results"]["config"]["train_samples"] == 12  # 2 users, 6 prefixes each


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_a_run_can_time_a_subset_of_the_ways_and_xla_choices(tmp_path, load_benchmark):
    benchmark = load_benchmark("bsarec_training")
    options = ["--steps", "2", "--batch-size", "8", "--max-sequence-length", "6"]
    benchmark.main(
        [
            *options,
            *("--steps-per-execution", "2", "--rounds", "1", "--trajectory-steps", "2"),
            *("--ways", "last-position", "--xla", "off", "--out", str(tmp_path)),
        ]
    )
    data = json.loads((tmp_path / "bsarec_training.json").read_text())
    rows = data["results"]["rows"]
    assert [(r["model"], r["way"], r["jit_compile"]) for r in rows] == [
        (model, way, False) for model in ("SASRec", "BSARec") for way in ("former", "last position")
    ]
    assert sorted(data["results"]["speedup"]["SASRec"]) == ["last position"]
    assert [g["jit_compile"] for g in data["results"]["trajectory"]] == [False, False]
    assert data["results"]["config"]["xla"] == "off"


@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="TensorFlow's profiler")
def test_profile_splits_each_epoch_into_validation_and_the_training_phases(
    tmp_path, load_benchmark
):
    benchmark = load_benchmark("bsarec_training")
    options = ["--steps", "2", "--batch-size", "8", "--max-sequence-length", "6"]
    benchmark.main(
        [
            *options,
            *("--rounds", "1", "--trajectory-steps", "1", "--ways", "last-position"),
            *("--xla", "off", "--profile", "--out", str(tmp_path)),
        ]
    )
    profile = json.loads((tmp_path / "bsarec_training.json").read_text())["results"]["profile"]
    assert [(row["model"], row["way"]) for row in profile] == [
        (model, way) for model in ("SASRec", "BSARec") for way in ("former", "last position")
    ]
    for row in profile:
        shares = row["shares"]
        assert list(shares) == ["validation", *benchmark.PHASES, "other"]
        assert sum(shares.values()) == pytest.approx(1.0)
        phases = ("validation", "last block", "earlier blocks", "embedding and scores")
        assert all(shares[phase] > 0 for phase in phases), shares
        # Every op of the step has its phase (the host's calls into the graph are no ops).
        assert shares["other"] < 0.2, shares
