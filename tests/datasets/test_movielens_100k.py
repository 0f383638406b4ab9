import importlib.util
import re

import numpy as np
import pytest
from installed_data import needs_data

from keras_attn.datasets import CorruptDataError, DatasetNotFoundError, load_movielens_100k
from keras_attn.datasets import movielens_100k as movielens_module

needs_recbole = needs_data(lambda: movielens_module._inter_path().is_file(), "recbole")


@needs_recbole
def test_movielens_100k_columns_and_counts():
    ratings = load_movielens_100k()
    assert sorted(ratings) == ["item_id", "rating", "timestamp", "user_id"]
    assert all(column.shape == (100_000,) for column in ratings.values())
    assert all(column.dtype == np.int64 for column in ratings.values())
    assert len(np.unique(ratings["user_id"])) == 943
    assert len(np.unique(ratings["item_id"])) == 1682
    assert set(np.unique(ratings["rating"])) == {1, 2, 3, 4, 5}
    assert np.bincount(ratings["user_id"])[1:].min() >= 20
    # Nobody rates a movie twice, so a held-out item is never in its user's history.
    pairs = ratings["user_id"] * 10_000 + ratings["item_id"]
    assert len(np.unique(pairs)) == 100_000


def test_movielens_100k_without_recbole(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    hint = "python -m keras_attn.datasets.fetch recbole"
    with pytest.raises(DatasetNotFoundError, match=re.escape(hint)):
        load_movielens_100k()


HEADER = "user_id:token\titem_id:token\trating:float\ttimestamp:float\n"
ROWS = "196\t242\t3\t881250949\n186\t302\t3\t891717742\n22\t377\t1\t878887116\n"


@pytest.mark.parametrize(
    "body, message",
    [
        (ROWS, "holds 3 ratings, expected 100000: the file is truncated"),
        (ROWS + "244\t5", r"line 5: expected 4 numbers, found '244\\t5'"),
        (ROWS.replace("\t3\t891", "\tnan\t891"), r"line 3: rating nan is not a whole number"),
        (ROWS.replace("\t1\t878", "\t3.5\t878"), r"line 4: rating 3\.5 is not a whole number"),
        (
            ROWS.replace("377", "9999"),
            r"line 4: item_id 9999\.0 is not a whole number in \[1, 1682\]",
        ),
    ],
)
def test_a_damaged_file_is_refused(monkeypatch, tmp_path, body, message):
    folder = tmp_path / "recbole" / "dataset_example" / "ml-100k"
    folder.mkdir(parents=True)
    (folder / "ml-100k.inter").write_text(HEADER + body)
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    with pytest.raises(CorruptDataError, match=message) as info:
        load_movielens_100k()
    assert str(folder / "ml-100k.inter") in str(info.value)
