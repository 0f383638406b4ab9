import argparse
import json

import numpy as np
import pytest

from keras_attn.reproduce import logsparse


def test_fast_reproduction_writes_results(tmp_path):
    args = argparse.Namespace(
        out=str(tmp_path), full=False, datasets=None, models=["logsparse_conv"], seed=0
    )
    outcome = logsparse.run(args)
    results = json.loads((tmp_path / "logsparse.json").read_text())
    assert (tmp_path / "logsparse.png").stat().st_size > 0
    rows = results["results"]["electricity"]
    assert set(rows) == {"seasonal_naive", "logsparse_conv"}
    for row in rows.values():
        assert 0.0 < row["R0.9"] < 5.0 and 0.0 < row["R0.5"] < 5.0
    # The seasonal-naive forecast of the electricity series is a few percent off.
    assert rows["seasonal_naive"]["R0.5"] < 0.1
    assert outcome["results"]["results"]["electricity"]["logsparse_conv"] == rows["logsparse_conv"]


@pytest.mark.slow
def test_full_reproduction(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_ATTN_SMALL", raising=False)
    args = argparse.Namespace(out=str(tmp_path), full=True, datasets=None, models=None, seed=0)
    results = logsparse.run(args)["results"]["results"]
    for rows in results.values():
        assert set(rows) == {"seasonal_naive", *logsparse.MODELS}
        assert all(np.isfinite(row["R0.9"]) for row in rows.values())
