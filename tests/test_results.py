import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from keras_attn.utils import finish_run
from keras_attn.utils import results as results_module
from keras_attn.utils.results import SMOKE_TEST_NOTICE, write_atomically


def test_finish_run_writes_meta_and_says_where(tmp_path, capsys):
    started_at = time.time() - 2.0
    paths = finish_run(tmp_path, "demo", {"accuracy": 0.5}, started_at=started_at, setting="full")
    data = json.loads(paths["json"].read_text())
    assert data["accuracy"] == 0.5
    assert data["meta"]["setting"] == "full"
    assert data["meta"]["wall_time_s"] >= 2.0
    assert len(data["meta"]["load_average"]) == 3
    assert data["meta"]["processor"] == results_module.processor_name()
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


def test_write_benchmark_says_where_and_writes_meta_and_results(tmp_path, capsys):
    path = tmp_path / "nested" / "bench.json"
    written = results_module.write_benchmark(path, {"ratio": 1.5}, started_at=time.time())
    data = json.loads(path.read_text())
    assert written == path and data["results"] == {"ratio": 1.5}
    assert data["meta"]["setting"] == "benchmark"
    assert f"wrote {path}" in capsys.readouterr().out


def _git(root, *args):
    command = ["git", "-c", "user.name=test", "-c", "user.email=test@example.com", *args]
    return subprocess.run(command, cwd=root, check=True, capture_output=True, text=True)


def test_the_commit_is_marked_changed_by_any_tracked_file_but_the_result_being_written(tmp_path):
    (tmp_path / "results").mkdir()
    result, code = tmp_path / "results" / "bench.json", tmp_path / "code.py"
    result.write_text("{}")
    code.write_text("x = 1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "start")
    head = _git(tmp_path, "rev-parse", "HEAD").stdout.strip()
    result.write_text('{"ratio": 1.5}')  # an earlier case of the same run, written
    assert results_module._git_commit(result, root=tmp_path) == head
    assert results_module._git_commit(root=tmp_path) == f"{head}+changes"
    code.write_text("x = 2\n")
    assert results_module._git_commit(result, root=tmp_path) == f"{head}+changes"


def small_figure(width):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(width, 1))
    figure.gca().plot([0, 1], [0, width])
    return figure


def test_a_failed_write_keeps_the_old_files(tmp_path):
    """A disk that fills up mid-write (a file-size limit) leaves the earlier result whole."""
    resource = pytest.importorskip("resource")
    from keras_attn.utils import write_results

    paths = write_results(tmp_path, "parity", {"accuracy": 0.5}, small_figure(2))
    old = {kind: path.read_bytes() for kind, path in paths.items()}
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (4096, hard))
    try:
        with pytest.raises(OSError):
            write_results(tmp_path, "parity", {"curve": list(range(5000))}, small_figure(3))
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert {kind: path.read_bytes() for kind, path in paths.items()} == old
    assert sorted(path.name for path in tmp_path.iterdir()) == ["parity.json", "parity.png"]


def test_overlapping_runs_do_not_replace_each_other(tmp_path, capsys):
    """Two runs of one name in one folder: the one that ends last keeps its own files."""
    first_started = time.time() - 1.0  # the first run began a second ago
    second = finish_run(
        tmp_path, "demo", {"run": 2}, small_figure(2), started_at=time.time(), setting="full"
    )
    written = {kind: path.read_bytes() for kind, path in second.items()}
    first = finish_run(
        tmp_path, "demo", {"run": 1}, small_figure(3), started_at=first_started, setting="full"
    )
    assert {kind: path.read_bytes() for kind, path in second.items()} == written
    assert first["json"].name.startswith("demo-") and first["json"].stem == first["png"].stem
    assert json.loads(first["json"].read_text())["run"] == 1
    assert first["png"].read_bytes() != written["png"]
    assert "was written by another run after this run started" in capsys.readouterr().out
    # A later run, started after both, replaces the files as before.
    third = finish_run(tmp_path, "demo", {"run": 3}, started_at=time.time(), setting="full")
    assert third["json"] == second["json"] and json.loads(third["json"].read_text())["run"] == 3


# Run B: loads keras_attn/utils/results.py on its own (it imports no other part of
# keras_attn, so the process starts in a second) and finishes a run whose plot does
# not render until the file "go" exists in the folder.
OTHER_RUN = """
import importlib.util, pathlib, sys, time
import matplotlib
matplotlib.use("Agg")
import matplotlib.artist, matplotlib.pyplot as plt

spec = importlib.util.spec_from_file_location("results", sys.argv[1])
results = importlib.util.module_from_spec(spec)
spec.loader.exec_module(results)
out = pathlib.Path(sys.argv[2])


class WaitForGo(matplotlib.artist.Artist):
    def draw(self, renderer):
        while not (out / "go").exists():
            time.sleep(0.01)


figure = plt.figure(figsize=(2, 1))
figure.gca().plot([0, 1], [0, 1])
figure.add_artist(WaitForGo())
results.finish_run(out, "demo", {"run": "B"}, figure, started_at=time.time(), setting="full")
"""


def test_a_run_keeps_results_another_run_renamed_into_place_after_it_started(tmp_path, capsys):
    """Run B writes its JSON before this run starts and renames it into place after: B's stay."""
    other = subprocess.Popen(
        [sys.executable, "-c", OTHER_RUN, results_module.__file__, str(tmp_path)]
    )
    try:
        while not list(tmp_path.glob(".demo.json.*.tmp")):  # B is rendering its plot
            assert other.poll() is None, "run B ended before it wrote its JSON"
            time.sleep(0.01)
        started_at = time.time()  # this run starts while B has not finished
        (tmp_path / "go").touch()
        ours = finish_run(
            tmp_path, "demo", {"run": "A"}, small_figure(2), started_at=started_at, setting="full"
        )
    finally:
        assert other.wait(timeout=60) == 0
    assert json.loads((tmp_path / "demo.json").read_text())["run"] == "B"
    assert ours["json"].name.startswith("demo-") and ours["json"].stem == ours["png"].stem
    assert json.loads(ours["json"].read_text())["run"] == "A"
    assert ours["png"].read_bytes() != (tmp_path / "demo.png").read_bytes()
    assert "was written by another run after this run started" in capsys.readouterr().out


def _record_syncs(monkeypatch):
    """Records `("fsync", inode)` and `("replace", target)` as the real calls run."""
    events = []
    fsync, replace = os.fsync, os.replace

    def recorded_fsync(descriptor):
        events.append(("fsync", os.fstat(descriptor).st_ino))
        fsync(descriptor)

    def recorded_replace(source, target):
        replace(source, target)
        events.append(("replace", Path(target)))

    monkeypatch.setattr(os, "fsync", recorded_fsync)
    monkeypatch.setattr(os, "replace", recorded_replace)
    return events


def _synced_before_renamed_then_folder(events, paths, folder):
    """Each file was flushed before its rename, and the folder after the last rename."""
    for path in paths:
        renamed = events.index(("replace", path))
        assert ("fsync", path.stat().st_ino) in events[:renamed]
    last_rename = max(events.index(("replace", path)) for path in paths)
    assert ("fsync", folder.stat().st_ino) in events[last_rename + 1 :]


def test_finished_results_are_flushed_to_the_disk(tmp_path, monkeypatch):
    """A power loss after `finish_run` returns cannot leave an empty JSON or plot."""
    events = _record_syncs(monkeypatch)
    paths = finish_run(
        tmp_path, "demo", {"run": 1}, small_figure(2), started_at=time.time(), setting="full"
    )
    _synced_before_renamed_then_folder(events, list(paths.values()), tmp_path)


def test_an_atomic_write_is_flushed_to_the_disk(tmp_path, monkeypatch):
    events = _record_syncs(monkeypatch)
    path = write_atomically(tmp_path / "run.json", lambda file: file.write(b"{}"))
    _synced_before_renamed_then_folder(events, [path], tmp_path)
    assert path.read_bytes() == b"{}"
