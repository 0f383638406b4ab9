import importlib.util
import re

import numpy as np
import pytest

from keras_attn.datasets import DatasetNotFoundError, load_movielens_100k
from keras_attn.datasets import movielens_100k as movielens_module


def _has_movielens():
    try:
        return movielens_module._inter_path().is_file()
    except DatasetNotFoundError:
        return False


needs_recbole = pytest.mark.skipif(
    not _has_movielens(), reason="needs `python -m keras_attn.datasets.fetch recbole`"
)


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
