import json

import pytest

from keras_attn import cli
from keras_attn.utils import is_small_run, write_results


def test_tour_trains_exports_and_reloads(tmp_path, capsys):
    assert is_small_run()  # conftest.py sets KERAS_ATTN_SMALL
    assert cli.main(["tour", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "tour.json").read_text())
    assert results["jit_compile"] is True
    assert results["test_accuracy"] > 0.3  # 10 classes: chance is 0.1
    assert results["saved_model_max_difference"] < 1e-4
    assert (tmp_path / "tour.png").stat().st_size > 0
    assert (tmp_path / "saved_model" / "saved_model.pb").exists()
    assert "Test accuracy" in capsys.readouterr().out


def test_unknown_command_exits_with_usage(capsys):
    with pytest.raises(SystemExit):
        cli.main(["no-such-command"])
    assert "usage: keras-attn" in capsys.readouterr().err


def test_small_run_switch(monkeypatch):
    for value, expected in (("1", True), ("0", False), ("", False), ("yes", True)):
        monkeypatch.setenv("KERAS_ATTN_SMALL", value)
        assert is_small_run() is expected


def test_write_results_converts_numpy_values(tmp_path):
    import numpy as np

    paths = write_results(tmp_path / "out", "demo", {"mean": np.float32(0.5), "xs": np.arange(3)})
    assert json.loads(paths["json"].read_text()) == {"mean": 0.5, "xs": [0, 1, 2]}
    assert "png" not in paths
