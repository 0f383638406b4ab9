import keras
import numpy as np
import pytest

from keras_attn.layers import PositionEmbedding
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import assert_allclose, to_numpy

pytestmark = pytest.mark.backend_agnostic

CHECKS = LayerChecks(
    PositionEmbedding,
    {"max_sequence_length": 12},
    input_shape=(2, 5, 4),
    num_params=12 * 4,
    bad_init_kwargs=[{"max_sequence_length": 0}, {"max_sequence_length": 3.5}],
)


test_layer_contract = LayerChecks.contract_test(CHECKS)


def test_adds_the_first_rows_of_the_table():
    layer = PositionEmbedding(max_sequence_length=6)
    x = np.random.default_rng(0).normal(size=(2, 4, 3)).astype("float32")
    output = layer(x)
    table = to_numpy(layer.embeddings)
    assert_allclose(output, x + table[None, :4], atol=1e-6)
    assert_allclose(layer(x[:, :2]), x[:, :2] + table[None, :2], atol=1e-6)


TOO_LONG = r"at most `max_sequence_length=3`. Received: inputs.shape\[1\]=4"


def test_too_long_input_is_rejected():
    with pytest.raises(ValueError, match=TOO_LONG):
        PositionEmbedding(max_sequence_length=3)(np.zeros((1, 4, 2), "float32"))


def test_too_long_input_of_a_built_layer_is_rejected_eager_and_compiled():
    inputs = keras.Input((None, 2))
    model = keras.Model(inputs, PositionEmbedding(max_sequence_length=3)(inputs))
    model.compile(jit_compile=keras.backend.backend() != "torch")
    too_long = np.zeros((1, 4, 2), "float32")
    with pytest.raises(ValueError, match=TOO_LONG):
        model(too_long)
    with pytest.raises(ValueError, match=TOO_LONG):
        model.predict_on_batch(too_long)


def test_a_served_model_gives_nan_for_a_length_past_the_table(tmp_path):
    """An export leaves the length unknown: a longer sequence cannot raise when served."""
    if keras.backend.backend() == "torch":
        pytest.skip("SavedModel export runs on the TensorFlow and JAX backends.")
    import tensorflow as tf

    inputs = keras.Input((None, 8))
    model = keras.Model(inputs, PositionEmbedding(max_sequence_length=6)(inputs))
    model.export(str(tmp_path / "model"), format="tf_saved_model", verbose=False)
    served = tf.saved_model.load(str(tmp_path / "model"))
    x = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")
    assert_allclose(served.serve(x), model(x), atol=1e-6)
    assert np.isnan(served.serve(np.ones((2, 10, 8), "float32")).numpy()).all()
