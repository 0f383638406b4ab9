import argparse
import json

import keras
import pytest

from keras_attn.cli import main
from keras_attn.reproduce import parity


@pytest.mark.slow
def test_parity_reproduction_writes_accuracies_for_both_scalings(tmp_path):
    assert main(["reproduce", "parity", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "parity.json").read_text())
    assert results["meta"]["setting"] == "fast"  # the small size is recorded as fast
    assert results["setting"] == parity.SETTINGS["small"]
    scales = {row["logit_scale"] for row in results["summary"]}
    assert scales == {"none", "log_length"}
    for row in results["summary"]:
        assert 0.0 <= row["median_test_accuracy"] <= 1.0
        assert row["seeds"] == results["setting"]["first_seeds"]
    assert (
        len(results["runs"])
        == 2 * len(results["setting"]["first_train_lengths"]) * (results["setting"]["first_seeds"])
    )
    assert (tmp_path / "parity.png").stat().st_size > 0


def test_full_and_small_choose_their_setting_like_every_reproduction(tmp_path, monkeypatch):
    chosen = []
    monkeypatch.setattr(parity, "train_and_test", lambda *a: chosen.append(a[3]) or [])
    monkeypatch.setattr(parity, "plot", lambda *a: None)
    for small, full, expected in (("1", True, "small"), ("", True, "full"), ("", False, "fast")):
        monkeypatch.setenv("KERAS_ATTN_SMALL", small)
        args = argparse.Namespace(out=str(tmp_path), full=full, tasks=["first"], train_lengths=None)
        outcome = parity.run(args)
        assert outcome["setting"] == expected
        expected_setting = dict(parity.SETTINGS[expected], parity_train_lengths=[])
        assert chosen[-1] == expected_setting  # only FIRST was asked for


@pytest.mark.slow
def test_two_worker_processes_give_the_same_runs_as_one(tmp_path):
    """The groups train in fresh one-thread processes; every run seeds itself."""
    outcomes = {}
    for workers in ("1", "2"):
        out = tmp_path / workers
        assert main(["reproduce", "parity", "--workers", workers, "--out", str(out)]) == 0
        outcomes[workers] = json.loads((out / "parity.json").read_text())["runs"]
    assert len(outcomes["1"]) == 2  # FIRST at one length, plain and scaled: two groups
    assert outcomes["2"] == outcomes["1"]


def test_workers_below_one_are_refused(tmp_path):
    args = argparse.Namespace(
        out=str(tmp_path), full=False, tasks=["first"], train_lengths=None, workers=0
    )
    with pytest.raises(ValueError, match="Received: workers=0"):
        parity.run(args)


@pytest.mark.backend_agnostic
def test_train_and_test_runs_on_torch():
    """Torch allows one step per execution only: the run must not ask for more."""
    if keras.backend.backend() != "torch":
        pytest.skip("The slow reproduction test runs it on TensorFlow.")
    setting = dict(parity.SETTINGS["small"], steps=4, batch_size=2, test_length=12, test_strings=4)
    (run,) = parity.train_and_test("first", 6, "none", setting)
    assert (run["task"], run["train_length"], run["seed"]) == ("first", 6, 0)
    assert 0.0 <= run["test_accuracy"] <= 1.0
