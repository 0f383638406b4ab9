import numpy as np
import pytest

from keras_attn.pruning import select_heads

SCORES = {"a": np.array([0.1, 0.2, 0.9]), "b": np.array([0.05, 0.5, 0.3])}


def test_global_lowest_first():
    assert select_heads(SCORES, 3) == {"a": [0, 1], "b": [0]}
    assert select_heads(SCORES, 0) == {}


def test_keeps_at_least_one_head_per_layer():
    assert select_heads(SCORES, 4) == {"a": [0, 1], "b": [0, 2]}
    assert select_heads({"a": np.array([0.0, 0.1]), "b": np.array([5.0, 6.0])}, 2) == {
        "a": [0],
        "b": [0],
    }
    assert select_heads(SCORES, 6, min_heads_per_layer=0) == {"a": [0, 1, 2], "b": [0, 1, 2]}


def test_ties_follow_layer_then_head_order():
    assert select_heads({"a": np.ones(2), "b": np.ones(2)}, 2) == {"a": [0], "b": [0]}


@pytest.mark.parametrize("count", [-1, 5, 2.0])
def test_bad_count(count):
    with pytest.raises(ValueError, match=f"Received: count={count!r}"):
        select_heads(SCORES, count)
