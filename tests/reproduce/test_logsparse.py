import argparse
import json

import numpy as np
import pytest

from keras_attn.reproduce import logsparse


# The whole small run, like every reproduction's (`python -m pytest -m slow`);
# the notebook trains the same models at the small size in the default suite.
@pytest.mark.slow
def test_small_reproduction_writes_both_comparisons_and_decoders(tmp_path):
    args = argparse.Namespace(
        out=str(tmp_path), full=False, datasets=None, models=["logsparse_conv"], seed=0
    )
    outcome = logsparse.run(args)
    results = json.loads((tmp_path / "logsparse.json").read_text())
    assert (tmp_path / "logsparse.png").stat().st_size > 0
    rows = results["results"]["electricity"]["same_window"]
    assert set(rows) == {"seasonal_naive", "logsparse_conv"}
    for row in rows.values():
        for decoder in ("mean_path", "sample_paths"):
            assert 0.0 < row[decoder]["R0.9"] < 5.0 and 0.0 < row[decoder]["R0.5"] < 5.0
    # The seasonal-naive forecast of the electricity series is a few percent off.
    assert rows["seasonal_naive"]["mean_path"]["R0.5"] < 0.1
    same = outcome["results"]["results"]["electricity"]["same_window"]
    assert same["logsparse_conv"] == rows["logsparse_conv"]
    # Under the memory budget LogSparse fits a longer window than full attention.
    budget = results["memory_budget"]
    full, sparse = budget["models"]["full_conv"], budget["models"]["logsparse_conv"]
    assert full["window"] == budget["reference_window"]
    assert sparse["window"] > full["window"]
    assert max(full["planned_bytes"], sparse["planned_bytes"]) <= budget["budget_bytes"]
    assert any(planned > budget["budget_bytes"] for planned in sparse["plans"].values()) or (
        sparse["context"] == logsparse.SETTINGS["small"]["budget"]["max_context"]
    )
    trained = results["results"]["electricity"]["budget"]["logsparse_conv"]
    assert trained["context"] == sparse["context"] and len(trained["runs"]) == 1
    assert trained["sample_paths"]["R0.9"]["std"] == 0.0  # one seed


@pytest.mark.slow
def test_full_reproduction(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_ATTN_SMALL", raising=False)
    args = argparse.Namespace(out=str(tmp_path), full=True, datasets=None, models=None, seed=0)
    results = logsparse.run(args)["results"]["results"]
    for rows in results.values():
        assert set(rows) == {"seasonal_naive", *logsparse.MODELS}
        assert all(np.isfinite(row["R0.9"]) for row in rows.values())
