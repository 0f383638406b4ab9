"""Item sequences, left padding and the leave-one-out split of BSARec and SASRec."""

import dataclasses
from collections.abc import Sequence

import numpy as np

from keras_attn._typing import Tensor
from keras_attn.utils.validation import check_int, renamed_arguments

PADDING_ITEM = 0


def index_items(item_ids: Tensor) -> tuple[np.ndarray, np.ndarray]:
    """Maps arbitrary item ids to `1..num_items`; 0 is kept for padding.

    Args:
        item_ids: 1D array of item ids (any sortable type).

    Returns:
        Tuple `(indices, vocabulary)`: int64 indices in `[1, num_items]`, and
        the sorted unique ids, so that `vocabulary[indices - 1] == item_ids`.
    """
    vocabulary, inverse = np.unique(np.asarray(item_ids), return_inverse=True)
    return inverse.astype(np.int64) + 1, vocabulary


def user_sequences(
    user_ids: Tensor, item_ids: Tensor, timestamps: Tensor
) -> tuple[np.ndarray, list[np.ndarray]]:
    """Each user's items in time order.

    Interactions with equal timestamps keep their input order (the sort is
    stable), so the result is deterministic.

    Args:
        user_ids: 1D array, the user of each interaction.
        item_ids: 1D int array, the item of each interaction (`>= 1`).
        timestamps: 1D array, the time of each interaction.

    Returns:
        Tuple `(users, sequences)`: the sorted unique users, and for each a
        1D int64 array of its items, oldest first.

    Example:

    >>> users, sequences = user_sequences([2, 1, 2], [5, 6, 7], [30, 10, 20])
    >>> users.tolist(), [s.tolist() for s in sequences]
    ([1, 2], [[6], [7, 5]])
    """
    user_ids, item_ids, timestamps = (np.asarray(a) for a in (user_ids, item_ids, timestamps))
    if not len(user_ids) == len(item_ids) == len(timestamps):
        raise ValueError(
            "`user_ids`, `item_ids` and `timestamps` must have the same length. Received: "
            f"lengths={(len(user_ids), len(item_ids), len(timestamps))}"
        )
    if np.any(item_ids <= PADDING_ITEM):
        raise ValueError(
            "`item_ids` must be >= 1 (0 is padding; see `index_items`). "
            f"Received: item_ids with minimum {item_ids.min()}"
        )
    order = np.lexsort((np.arange(len(user_ids)), timestamps, user_ids))
    users, starts = np.unique(user_ids[order], return_index=True)
    sequences = np.split(item_ids[order].astype(np.int64), starts[1:])
    return users, sequences


def left_pad(sequences: Sequence[Tensor], length: int) -> np.ndarray:
    """The last `length` items of each sequence, left-padded with 0.

    Args:
        sequences: list of 1D int arrays (empty ones allowed).
        length: int, the output width.

    Returns:
        int32 array of shape `(len(sequences), length)`.

    Example:

    >>> left_pad([[1, 2, 3], [4]], 2).tolist()
    [[2, 3], [0, 4]]
    """
    padded = np.full((len(sequences), length), PADDING_ITEM, np.int32)
    for row, sequence in enumerate(sequences):
        tail = np.asarray(sequence, np.int32)[max(len(sequence) - length, 0) :]
        padded[row, length - len(tail) :] = tail
    return padded


@dataclasses.dataclass
class LeaveOneOutSplit:
    """Leave-one-out samples of next-item prediction.

    Attributes:
        train_inputs: `(num_train, max_sequence_length)` left-padded prefixes.
        train_targets: `(num_train,)` the item after each prefix.
        valid_inputs: `(num_users, max_sequence_length)` each history minus its last two items.
        valid_targets: `(num_users,)` each second-to-last item.
        valid_seen: list of 1D arrays, the items of each validation history.
        test_inputs: `(num_users, max_sequence_length)` each history minus its last item.
        test_targets: `(num_users,)` each last item.
        test_seen: list of 1D arrays, the items of each test history.
    """

    train_inputs: np.ndarray
    train_targets: np.ndarray
    valid_inputs: np.ndarray
    valid_targets: np.ndarray
    valid_seen: list
    test_inputs: np.ndarray
    test_targets: np.ndarray
    test_seen: list


@renamed_arguments(max_length="max_sequence_length")
def leave_one_out_split(
    sequences: Sequence[Tensor], max_sequence_length: int = 50
) -> LeaveOneOutSplit:
    """Splits item sequences as BSARec's official code does.

    For a sequence `s`: the test query is `s[:-1] -> s[-1]`, the validation
    query `s[:-2] -> s[-2]`. Training uses the window `w = s[:-2][-max_sequence_length:]`
    and every prefix of it: `w[:i] -> w[i]` for `i = 0 .. len(w) - 1` (the
    first has an empty, all-padding history). Inputs keep their last
    `max_sequence_length` items and are left-padded with 0, so the item to predict
    always follows the last column.

    Args:
        sequences: list of 1D int arrays, items in time order, each with at
            least 3 items.
        max_sequence_length: int, width of the padded inputs.

    Returns:
        A `LeaveOneOutSplit`.

    Example:

    >>> split = leave_one_out_split([np.array([1, 2, 3, 4])], max_sequence_length=3)
    >>> split.train_inputs.tolist(), split.train_targets.tolist()
    ([[0, 0, 0], [0, 0, 1]], [1, 2])
    >>> split.test_inputs.tolist(), split.test_targets.tolist()
    ([[1, 2, 3]], [4])
    """
    max_sequence_length = check_int("max_sequence_length", max_sequence_length)
    shortest = min(len(s) for s in sequences)
    if shortest < 3:
        raise ValueError(
            "Every sequence needs at least 3 items (train, valid, test). "
            f"Received: sequences with a shortest length={shortest}"
        )
    prefixes, targets = [], []
    for sequence in sequences:
        window = sequence[:-2][-max_sequence_length:]
        prefixes.extend(window[:i] for i in range(len(window)))
        targets.extend(window)
    return LeaveOneOutSplit(
        train_inputs=left_pad(prefixes, max_sequence_length),
        train_targets=np.asarray(targets, np.int32),
        valid_inputs=left_pad([s[:-2] for s in sequences], max_sequence_length),
        valid_targets=np.asarray([s[-2] for s in sequences], np.int32),
        valid_seen=[np.asarray(s[:-2]) for s in sequences],
        test_inputs=left_pad([s[:-1] for s in sequences], max_sequence_length),
        test_targets=np.asarray([s[-1] for s in sequences], np.int32),
        test_seen=[np.asarray(s[:-1]) for s in sequences],
    )


@renamed_arguments(max_length="max_sequence_length")
def movielens_100k_split(
    max_sequence_length: int = 50, users: int | None = None
) -> tuple[LeaveOneOutSplit, int]:
    """The leave-one-out split of MovieLens-100K, as BSARec and SASRec use it.

    Items get the indices of `index_items` (1682 items, 0 for padding); each
    user's ratings, in time order, are one sequence (`user_sequences`),
    split by `leave_one_out_split`.

    Args:
        max_sequence_length: int, width of the padded inputs.
        users: optional int, keep only the first `users` users (in user id
            order), for quick runs.

    Returns:
        Tuple `(split, num_items)`: a `LeaveOneOutSplit` and the number of
        items of all of MovieLens-100K (the last valid index).

    Raises:
        DatasetNotFoundError: if the data is not installed (see
            `keras_attn.datasets.load_movielens_100k`).
    """
    from keras_attn.datasets import load_movielens_100k

    ratings = load_movielens_100k()
    items, vocabulary = index_items(ratings["item_id"])
    _, sequences = user_sequences(ratings["user_id"], items, ratings["timestamp"])
    return leave_one_out_split(sequences[:users], max_sequence_length), len(vocabulary)
