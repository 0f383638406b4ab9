import json
import time
from pathlib import Path

import pytest

from keras_attn.utils import finish_run
from keras_attn.utils.results import SMOKE_TEST_NOTICE


def test_finish_run_writes_meta_and_says_where(tmp_path, capsys):
    started_at = time.time() - 2.0
    paths = finish_run(tmp_path, "demo", {"accuracy": 0.5}, started_at=started_at, setting="full")
    data = json.loads(paths["json"].read_text())
    assert data["accuracy"] == 0.5
    assert data["meta"]["setting"] == "full"
    assert data["meta"]["wall_time_s"] >= 2.0
    assert len(data["meta"]["load_average"]) == 3
    out = capsys.readouterr().out
    assert f"Wrote {paths['json']}" in out
    assert SMOKE_TEST_NOTICE not in out


@pytest.mark.parametrize("setting", ["fast", "small"])
def test_fast_runs_are_labelled_smoke_tests(tmp_path, capsys, setting):
    paths = finish_run(tmp_path, "demo", {}, started_at=time.time(), setting=setting)
    assert json.loads(paths["json"].read_text())["meta"]["setting"] == "fast"
    assert SMOKE_TEST_NOTICE in capsys.readouterr().out


def test_finish_run_rejects_a_meta_key_and_unknown_settings(tmp_path):
    with pytest.raises(ValueError, match="meta"):
        finish_run(tmp_path, "demo", {"meta": 1}, started_at=time.time(), setting="full")
    with pytest.raises(ValueError, match="setting='huge'"):
        finish_run(tmp_path, "demo", {}, started_at=time.time(), setting="huge")


def test_committed_results_name_no_absolute_path():
    """A result's command says where it wrote relative to the repository, never a machine path."""
    paths = sorted(Path("results").rglob("*.json"))
    assert paths
    for path in paths:
        command = json.loads(path.read_text())["meta"]["command"]
        absolute = [word for word in command.split() if word.startswith("/")]
        assert absolute == [], f"{path}: {command}"


def test_write_benchmark_reads_meta_before_the_file_exists(tmp_path, monkeypatch, capsys):
    from keras_attn.utils import results as results_module

    path = tmp_path / "nested" / "bench.json"
    seen = []

    def metadata(started_at, setting):
        seen.append((path.exists(), setting))
        return {"setting": setting}

    monkeypatch.setattr(results_module, "run_metadata", metadata)
    written = results_module.write_benchmark(path, {"ratio": 1.5}, started_at=time.time())
    assert written == path and seen == [(False, "benchmark")]
    expected = {"meta": {"setting": "benchmark"}, "results": {"ratio": 1.5}}
    assert json.loads(path.read_text()) == expected
    assert f"wrote {path}" in capsys.readouterr().out
