"""SavedModel export of a model whose padding mask is a separate input."""

import keras
import numpy as np
import pytest

from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.testing.arrays import assert_allclose

pytestmark = pytest.mark.backend_agnostic


def test_a_separate_mask_input_exports_and_serves_two_lengths(tmp_path):
    """On JAX the two inputs' lengths are declared equal, as the attention docs say."""
    if keras.backend.backend() == "torch":
        pytest.skip("SavedModel export runs on the TensorFlow and JAX backends.")
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    x, mask = keras.Input((None, 8)), keras.Input((None,), dtype="bool")
    model = keras.Model([x, mask], MultiHeadSelfAttention(2, 4)(x, mask=mask))
    options = {}
    if keras.backend.backend() == "jax":
        shapes = [["(batch, length, 8)", "(batch, length)"]]  # one argument: the list of inputs
        options["jax2tf_kwargs"] = {"polymorphic_shapes": shapes}
    model.export(str(tmp_path / "model"), format="tf_saved_model", verbose=False, **options)
    served = tf.saved_model.load(str(tmp_path / "model"))
    rng = np.random.default_rng(1)
    for length in (5, 11):
        inputs = [
            rng.normal(size=(2, length, 8)).astype("float32"),
            np.arange(length) < np.array([[length], [3]]),  # the second row: 3 real tokens
        ]
        assert_allclose(served.serve(inputs), model(inputs), atol=1e-5)


def test_unrelated_symbolic_lengths_name_the_mask_and_the_fix(tmp_path):
    """Without the declaration, JAX's export gives the mask a length of its own."""
    if keras.backend.backend() != "jax":
        pytest.skip("Symbolic lengths are JAX's, when `model.export` traces a model.")
    x, mask = keras.Input((None, 8)), keras.Input((None,), dtype="bool")
    model = keras.Model([x, mask], MultiHeadSelfAttention(2, 4)(x, mask=mask))
    with pytest.raises(ValueError, match=r"`mask` must have shape .*polymorphic_shapes"):
        model.export(str(tmp_path / "model"), format="tf_saved_model", verbose=False)
    assert not (tmp_path / "model").exists()
