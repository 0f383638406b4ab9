import argparse
import json

import numpy as np
import pytest

from keras_attn.reproduce import logsparse


def test_calendar_covariates_and_windows():
    stamps = np.array(["2024-01-01T00", "2024-01-01T23", "2024-01-02T05"], "datetime64[h]")
    covariates = logsparse.calendar_covariates(stamps)
    assert covariates["hour_of_day"].tolist() == [0, 23, 5]
    assert covariates["day_of_week"].tolist() == [0, 0, 1]  # a Monday, then Tuesday
    values = np.arange(1.0, 21.0)
    covariates = {"hour_of_day": np.arange(20).astype("int32") % 24}
    inputs, targets, scales = logsparse.make_windows(values, covariates, [3, 10], 4, 2)
    # Window starting at index 3 holds 4..9; its scale is the mean of 4..7.
    np.testing.assert_allclose(scales, [5.5, 12.5])
    np.testing.assert_allclose(targets[0], np.arange(4.0, 10.0) / 5.5, rtol=1e-6)
    np.testing.assert_allclose(inputs["lagged_target"][0, :, 0], np.arange(3.0, 9.0) / 5.5)
    assert inputs["hour_of_day"][1].tolist() == list(range(10, 16))
    naive = logsparse.seasonal_naive(values, [30 - 10], 3, season=5)
    assert naive.tolist() == [[16.0, 17.0, 18.0]]


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
    assert outcome["results"]["electricity"]["logsparse_conv"] == rows["logsparse_conv"]


@pytest.mark.slow
def test_full_reproduction(tmp_path, monkeypatch):
    monkeypatch.delenv("KERAS_ATTN_SMALL", raising=False)
    args = argparse.Namespace(out=str(tmp_path), full=True, datasets=None, models=None, seed=0)
    results = logsparse.run(args)["results"]
    for rows in results.values():
        assert set(rows) == {"seasonal_naive", *logsparse.MODELS}
        assert all(np.isfinite(row["R0.9"]) for row in rows.values())
