"""MovieLens-100K ratings, read from the copy bundled with the recbole wheel."""

import numpy as np

from keras_attn.datasets._utils import check_count, read_numbers, whole_numbers
from keras_attn.datasets.data_cache import find_package_file
from keras_attn.datasets.errors import CorruptDataError

_HEADER = ["user_id:token", "item_id:token", "rating:float", "timestamp:float"]
_INSTALL_HINT = "python -m keras_attn.datasets.fetch recbole"
_RATINGS = 100_000
# The valid range of each column; timestamps are Unix seconds of 1997-1998.
_RANGES = {"user_id": (1, 943), "item_id": (1, 1682), "rating": (1, 5), "timestamp": (0, 2**31)}


def _inter_path():
    """Path of recbole's `ml-100k.inter` in the data cache (or an installed recbole)."""
    return find_package_file(
        "recbole",
        "dataset_example/ml-100k/ml-100k.inter",
        "MovieLens-100K",
        _INSTALL_HINT,
    )


def load_movielens_100k() -> dict[str, np.ndarray]:
    """Loads the 100,000 MovieLens-100K ratings that ship with recbole.

    The source is `recbole/dataset_example/ml-100k/ml-100k.inter`, which
    setup extracts from the recbole wheel into the data cache
    (`python -m keras_attn.datasets.fetch recbole`; recbole itself is never
    installed or imported). It holds 100,000 ratings of
    1,682 movies by 943 users, each user with at least 20 ratings, as
    tab-separated `user_id, item_id, rating, timestamp` rows. The GroupLens
    terms forbid redistributing the data, so keras_attn never ships it.

    Returns:
        dict of four int64 numpy arrays of shape `(100000,)`, in file order:
        `"user_id"` (1-943), `"item_id"` (1-1682), `"rating"` (1-5) and
        `"timestamp"` (Unix seconds).

    Raises:
        DatasetNotFoundError: if the file is in neither the data cache nor an
            installed recbole.
        CorruptDataError: (a `ValueError`) if the file does not have the
            expected header, a line is not four numbers, a value is not a
            whole number in its column's range (the line is named), or the
            file does not hold 100,000 ratings (it is truncated).

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
        raise CorruptDataError(f"Expected the columns {_HEADER} in {path}, found {header}.")
    table = read_numbers(path, len(_HEADER), delimiter="\t", header_lines=1)
    ratings = {
        name: whole_numbers(values, path, name, *_RANGES[name], header_lines=1)
        for name, values in zip(_RANGES, table.T, strict=True)
    }
    check_count(path, "ratings", len(table), _RATINGS, _INSTALL_HINT)
    return ratings
