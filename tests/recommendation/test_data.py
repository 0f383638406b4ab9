import numpy as np
import pytest

from keras_attn.recommendation import (
    index_items,
    leave_one_out_split,
    left_pad,
    movielens_100k_split,
    user_sequences,
)


def test_index_items_reserves_zero_for_padding():
    indices, vocabulary = index_items(np.array(["b", "a", "c", "a"]))
    assert indices.tolist() == [2, 1, 3, 1]
    assert vocabulary[indices - 1].tolist() == ["b", "a", "c", "a"]


def test_user_sequences_sort_by_time_and_keep_input_order_on_ties():
    users, sequences = user_sequences(
        user_ids=[7, 3, 7, 7, 3, 7],
        item_ids=[10, 20, 11, 12, 21, 13],
        timestamps=[5, 2, 1, 5, 1, 3],
    )
    assert users.tolist() == [3, 7]
    # User 7: t=1 (11), t=3 (13), then the two t=5 items in input order (10, 12).
    assert [s.tolist() for s in sequences] == [[21, 20], [11, 13, 10, 12]]


def test_user_sequences_reject_padding_items_and_ragged_columns():
    with pytest.raises(ValueError, match="Received: item_ids"):
        user_sequences([1, 1], [0, 2], [1, 2])
    with pytest.raises(ValueError, match="Received: lengths"):
        user_sequences([1, 1], [1], [1, 2])


def test_left_pad_keeps_the_most_recent_items():
    padded = left_pad([np.array([1, 2, 3, 4]), np.array([5]), np.array([], int)], 3)
    assert padded.tolist() == [[2, 3, 4], [0, 0, 5], [0, 0, 0]]
    assert padded.dtype == np.int32


def test_leave_one_out_split_by_hand():
    sequences = [np.array([1, 2, 3, 4, 5, 6]), np.array([7, 8, 9])]
    split = leave_one_out_split(sequences, max_sequence_length=3)
    # User 0: the window is the last 3 items before the last two: [2, 3, 4].
    # User 1: the window is [7].
    assert split.train_inputs.tolist() == [[0, 0, 0], [0, 0, 2], [0, 2, 3], [0, 0, 0]]
    assert split.train_targets.tolist() == [2, 3, 4, 7]
    assert split.valid_inputs.tolist() == [[2, 3, 4], [0, 0, 7]]
    assert split.valid_targets.tolist() == [5, 8]
    assert [s.tolist() for s in split.valid_seen] == [[1, 2, 3, 4], [7]]
    assert split.test_inputs.tolist() == [[3, 4, 5], [0, 7, 8]]
    assert split.test_targets.tolist() == [6, 9]
    assert [s.tolist() for s in split.test_seen] == [[1, 2, 3, 4, 5], [7, 8]]


def test_leave_one_out_split_never_trains_on_validation_or_test_items():
    rng = np.random.default_rng(0)
    sequences = [rng.permutation(np.arange(1, 40))[: rng.integers(3, 30)] for _ in range(20)]
    split = leave_one_out_split(sequences, max_sequence_length=8)
    starts = np.cumsum([0] + [min(len(s) - 2, 8) for s in sequences])
    for user, sequence in enumerate(sequences):
        rows = slice(starts[user], starts[user + 1])
        held_out = set(sequence[-2:].tolist())
        assert held_out.isdisjoint(split.train_targets[rows].tolist())
        assert held_out.isdisjoint(split.train_inputs[rows].ravel().tolist())


def test_leave_one_out_split_rejects_short_sequences_and_bad_length():
    with pytest.raises(ValueError, match="Received: sequences"):
        leave_one_out_split([np.array([1, 2])])
    with pytest.raises(ValueError, match="Received: max_sequence_length"):
        leave_one_out_split([np.array([1, 2, 3])], max_sequence_length=0)


def _has_movielens():
    from keras_attn.datasets import DatasetNotFoundError, movielens_100k

    try:
        return movielens_100k._inter_path().is_file()
    except DatasetNotFoundError:
        return False


@pytest.mark.skipif(not _has_movielens(), reason="needs MovieLens-100K (recbole)")
def test_movielens_split_keeps_the_first_users_and_every_item_index():
    split, num_items = movielens_100k_split(max_sequence_length=5, users=4)
    assert num_items == 1682
    assert split.test_inputs.shape == (4, 5) and split.test_targets.shape == (4,)
    assert split.valid_inputs.shape == (4, 5)
    every = np.concatenate([split.train_inputs.ravel(), split.train_targets, split.test_targets])
    assert every.min() >= 0 and every.max() <= num_items
    # The test query is the validation query followed by its target.
    np.testing.assert_array_equal(split.test_inputs[:, -1], split.valid_targets)
