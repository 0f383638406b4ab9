import numpy as np
import pytest

from keras_attn.datasets import all_bit_strings, encode_bit_strings, make_bit_strings


def test_parity_puts_cls_last_and_labels_odd_counts():
    tokens, labels = encode_bit_strings([[1, 0, 1], [1, 1, 1], [0, 0, 0]], "parity")
    np.testing.assert_array_equal(tokens, [[1, 0, 1, 2], [1, 1, 1, 2], [0, 0, 0, 2]])
    np.testing.assert_array_equal(labels, [0, 1, 0])


def test_first_puts_cls_first_and_labels_the_first_bit():
    tokens, labels = encode_bit_strings([[1, 0, 0], [0, 1, 1]], "first")
    np.testing.assert_array_equal(tokens, [[2, 1, 0, 0], [2, 0, 1, 1]])
    np.testing.assert_array_equal(labels, [1, 0])


def test_all_strings_are_distinct_and_random_ones_are_seeded():
    tokens, labels = all_bit_strings(4, "parity")
    assert len({tuple(row) for row in tokens}) == 16 and labels.mean() == 0.5
    first, _ = make_bit_strings(5, 7, "first", seed=3)
    again, _ = make_bit_strings(5, 7, "first", seed=3)
    np.testing.assert_array_equal(first, again)
    assert first.dtype == np.int32 and first.shape == (5, 8)


def test_unknown_task_is_rejected():
    with pytest.raises(ValueError, match="Received: task='dyck'"):
        make_bit_strings(2, 3, "dyck")
