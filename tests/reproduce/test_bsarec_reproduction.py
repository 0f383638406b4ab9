import argparse
import json
import re
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_attn.models import build_sasrec
from keras_attn.recommendation import fit_recommender, leave_one_out_split
from keras_attn.reproduce import available, bsarec


def test_reproduction_is_registered():
    assert available()["bsarec"] is bsarec


def _args(*options):
    parser = argparse.ArgumentParser()
    bsarec.add_arguments(parser)
    return parser.parse_args(list(options))


@pytest.mark.slow
def test_fast_reproduction_writes_six_metrics_per_model(tmp_path):
    args = _args("--seeds", "1", "--epochs", "1")
    args.out, args.full = str(tmp_path), False
    outcome = bsarec.run(args)
    results = json.loads(outcome["paths"]["json"].read_text())
    assert outcome["paths"]["png"].is_file()
    # KERAS_ATTN_SMALL runs the fast sizes (bsarec has no small entry), named small.
    assert outcome["setting"] == results["setting"] == "small"
    assert results["meta"]["setting"] == "fast"  # the small size is recorded as fast
    assert results["users"] == bsarec.SETTINGS["fast"]["users"]
    for model in bsarec.MODELS:
        assert sorted(k for k in results["summary"][model] if k in bsarec.METRICS) == sorted(
            bsarec.METRICS
        )
        for metric in bsarec.METRICS:
            assert 0.0 < results["summary"][model][metric]["mean"] < 1.0
        assert len(results["runs"][model]) == 1
    assert not (tmp_path / "bsarec-partial.json").exists()  # removed once all runs are done
    # Run again: every run is read back from the state folder, nothing trains.
    again = bsarec.run(args)
    assert again["results"]["summary"] == results["summary"]


def test_the_full_setting_runs_the_official_protocol():
    config = bsarec.protocol(_args(), bsarec.SETTINGS["full"])
    assert config["users"] is None  # all 943
    assert (config["seeds"], config["epochs"], config["patience"]) == (3, 200, 10)
    assert (config["max_sequence_length"], config["learning_rate"], config["batch_size"]) == (
        50,
        1e-3,
        256,
    )
    assert config["search"] and config["search_patience"] == 5
    assert config["alphas"] == [0.1, 0.3, 0.5, 0.7, 0.9]
    assert config["cutoffs"] == [1, 3, 5, 7, 9]
    assert bsarec.MODELS == {
        "SASRec (BCE)": "bce",
        "SASRec (softmax)": "softmax",
        "BSARec": "softmax",
    }


def test_a_state_folder_of_another_protocol_is_refused(tmp_path):
    config = bsarec.protocol(_args(), bsarec.SETTINGS["fast"])
    bsarec.check_state_folder(tmp_path, config)
    bsarec.check_state_folder(tmp_path, config)  # the same protocol resumes
    other = {**config, "epochs": 5}
    with pytest.raises(ValueError, match=r"another protocol.*\['epochs'\].*Received: epochs=5"):
        bsarec.check_state_folder(tmp_path, other)


def test_a_state_folder_of_another_training_version_is_refused(tmp_path):
    args = _args("--state", str(tmp_path))
    args.out, args.full = str(tmp_path / "out"), False
    config = bsarec.protocol(args, bsarec.SETTINGS["fast"])
    assert config["training_path"] == bsarec.TRAINING_PATH == 2
    # A folder made before the version was recorded, with a finished run: the
    # same command refuses it before any run is read back or trained.
    before = {key: value for key, value in config.items() if key != "training_path"}
    (tmp_path / "protocol.json").write_text(json.dumps(before))
    finished = tmp_path / "test-SASRec-BCE-seed0.json"
    finished.write_text("{}")
    with pytest.raises(ValueError, match=r"another version.*training_path=2, the folder's 1"):
        bsarec.run(args)
    assert not (tmp_path / "out").exists() and finished.read_text() == "{}"


@pytest.mark.backend_agnostic
@pytest.mark.usefixtures("eager_tensorflow_steps")
def test_a_run_trains_and_records_its_devices_on_every_backend(tmp_path):
    # JAX runs eagerly op by op without XLA: compile there, as a user would.
    jax = keras.backend.backend() == "jax"
    config = {
        "users": 20,
        "max_sequence_length": 8,
        "epochs": 1,
        "learning_rate": 1e-3,
        "batch_size": 64,
        "jit_compile": {"SASRec": jax, "BSARec": jax},
    }
    spec = bsarec.run_spec("SASRec (softmax)", 0, None, None, 1)
    done = tmp_path / f"{spec['name']}.json"
    done.write_text('{"name": "test-SAS')  # a result file cut short: set aside, trained again
    with pytest.warns(UserWarning, match=rf"{done.name} cannot be read \(JSONDecodeError"):
        result = bsarec.train_run(spec, config, str(tmp_path))
    assert result["devices"] and all(":" in device for device in result["devices"])
    assert result["epochs_run"] == 1 and set(result["test"]) == set(bsarec.METRICS)
    assert json.loads(done.read_text()) == result
    assert (tmp_path / f"{done.name}.damaged").read_text() == '{"name": "test-SAS'


def _finished_run(spec):
    """A finished run's result as `train_run` writes it (its numbers made up)."""
    return {
        **spec,
        "test": dict.fromkeys(bsarec.METRICS, 0.25),
        "best_epoch": 1,
        "epochs_run": 2,
        "valid_ndcg20": [0.1, 0.05],
        "best_valid_ndcg20": 0.1,
        "seconds": 3.0,
    }


def test_a_finished_run_is_read_back_not_trained(tmp_path):
    spec = bsarec.run_spec("SASRec (BCE)", 1, 0.5, 3, 10)
    assert spec["name"] == "test-SASRec-BCE-seed1" and spec["alpha"] is None
    assert bsarec.run_spec("BSARec", 0, 0.5, 3, 5, "search")["name"] == (
        "search-BSARec-seed0-alpha0.5-c3"
    )
    finished = _finished_run(spec)
    (tmp_path / f"{spec['name']}.json").write_text(json.dumps(finished))
    assert bsarec.train_run(spec, {}, str(tmp_path)) == finished


SPEC = bsarec.run_spec("BSARec", 0, 0.5, 3, 5)
DAMAGED_RESULTS = {
    "empty": ("", "JSONDecodeError"),
    "cut short": (json.dumps(_finished_run(SPEC))[:-30], "JSONDecodeError"),
    "not UTF-8": (b'{"name": "\xff"}', "UnicodeDecodeError"),
    "not a dict": ("[1, 2]", "not a run's result"),
    "another run's": (
        json.dumps(_finished_run(bsarec.run_spec("BSARec", 0, 0.7, 3, 5))),
        "the result of another run: {'name': 'test-BSARec-seed0-alpha0.7-c3', 'alpha': 0.7}",
    ),
    "no test metric": (
        json.dumps({**_finished_run(SPEC), "test": {"HR@5": 0.5}}),
        "missing ['test.NDCG@5'",
    ),
}


@pytest.mark.parametrize(("content", "problem"), DAMAGED_RESULTS.values(), ids=DAMAGED_RESULTS)
def test_a_damaged_finished_run_is_set_aside(tmp_path, content, problem):
    path = tmp_path / "run.json"
    getattr(path, "write_bytes" if isinstance(content, bytes) else "write_text")(content)
    with pytest.warns(UserWarning, match=re.escape(f"run.json cannot be read ({problem}")):
        assert bsarec.read_finished_run(path, SPEC) is None
    assert [p.name for p in tmp_path.iterdir()] == ["run.json.damaged"]


@pytest.mark.parametrize("content", ["", '{"users": 2', "[1]"], ids=["empty", "cut short", "list"])
def test_a_damaged_protocol_file_says_what_to_do(tmp_path, content):
    config = bsarec.protocol(_args(), bsarec.SETTINGS["fast"])
    (tmp_path / "protocol.json").write_text(content)
    with pytest.raises(ValueError, match=r"protocol\.json cannot be read.*remove it.*Received"):
        bsarec.check_state_folder(tmp_path, config)
    assert (tmp_path / "protocol.json").read_text() == content


def test_a_diverged_training_is_an_error_not_a_perfect_score():
    sequences = [np.array([1, 2, 3, 4, 5]), np.array([2, 4, 1, 3, 5]), np.array([5, 3, 1, 2])]
    split = leave_one_out_split(sequences, max_sequence_length=4)
    model = build_sasrec(5, max_sequence_length=4, hidden_dim=8, num_layers=1, seed=0)
    with pytest.warns(UserWarning, match="non-finite"):
        fitted = fit_recommender(
            model, split, num_items=5, epochs=2, patience=1, learning_rate=1e30, batch_size=16
        )
    assert fitted["best_epoch"] is None
    with pytest.raises(ValueError, match=r"diverged.*Received: learning_rate=1e\+30"):
        bsarec.check_converged(fitted, 1e30)


def test_the_partial_results_count_a_run_of_both_search_stages_once(tmp_path):
    args = _args()
    args.out = str(tmp_path)
    config = bsarec.protocol(args, bsarec.SETTINGS["fast"])
    report = bsarec.Report(args, "fast", config, started_at=0.0)
    shared = {**bsarec.run_spec("BSARec", 0, 0.1, 3, 2, "search"), "seconds": 5.0}
    other = {**bsarec.run_spec("BSARec", 0, 0.1, 5, 2, "search"), "seconds": 7.0}
    for run in (shared, other, shared):  # the alpha stage, then the c stage
        report.add(run)
    partial = json.loads((tmp_path / "bsarec-partial.json").read_text())
    assert [run["cutoff"] for run in partial["finished_runs"]] == [3, 5]
    assert partial["train_seconds_all_runs"] == 12.0


def test_the_committed_runs_of_record_read_back():
    """The protocol of record's finished runs (run-state/bsarec-full) are results, not damage."""
    paths = sorted(Path("run-state/bsarec-full").glob("*-seed*.json"))
    assert len(paths) == 18
    for path in paths:
        saved = json.loads(path.read_text())
        keys = ("model", "seed", "alpha", "cutoff", "patience", "stage")
        spec = bsarec.run_spec(*(saved[key] for key in keys))
        assert spec["name"] == path.stem
        assert bsarec.read_finished_run(path, spec) == saved
