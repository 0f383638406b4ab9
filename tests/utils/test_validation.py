import re

import numpy as np
import pytest

from keras_attn.layers import TransformerBlock
from keras_attn.utils.validation import check_bool, check_heads


def test_check_bool_takes_numpy_bools_and_refuses_numbers():
    assert check_bool("norm_first", np.True_) is True
    assert check_bool("norm_first", np.bool_(False)) is False
    assert TransformerBlock(2, 8, normalize_first=np.False_).normalize_first is False
    with pytest.raises(ValueError, match="Received: norm_first=1"):
        check_bool("norm_first", 1)


def test_check_heads_returns_python_ints_and_names_the_width():
    hidden_dim, num_heads = check_heads(np.int64(12), np.int32(3))
    assert (hidden_dim, num_heads) == (12, 3)
    assert type(hidden_dim) is int and type(num_heads) is int
    message = "`hidden_dim` must be divisible by `num_heads=5`. Received: hidden_dim=12"
    with pytest.raises(ValueError, match=re.escape(message)):
        check_heads(12, 5)
    with pytest.raises(ValueError, match="Received: num_heads=True"):
        check_heads(12, True)
