"""`clone_initializer`: one copy of an initializer per sublayer."""

import keras
import numpy as np
import pytest

from keras_attn.utils.initializers import clone_initializer

pytestmark = pytest.mark.backend_agnostic


def test_a_clone_is_a_new_object_that_draws_the_same_values():
    original = keras.initializers.GlorotUniform(seed=3)
    clone = clone_initializer(original)
    assert clone is not original
    assert clone.get_config() == original.get_config()
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(clone((3, 4))), keras.ops.convert_to_numpy(original((3, 4)))
    )
