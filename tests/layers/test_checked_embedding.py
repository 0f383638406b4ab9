import re

import keras
import numpy as np
import pytest

from keras_attn.layers import CheckedEmbedding
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import assert_allclose, to_numpy

pytestmark = pytest.mark.backend_agnostic

CHECKS = LayerChecks(
    CheckedEmbedding,
    {"input_dim": 10, "output_dim": 4, "ids_name": "token_ids"},
    input_shape=(2, 5),
    expected_output_shape=(2, 5, 4),
    input_dtype="int32",
    input_range=(0, 10),
    num_params=10 * 4,
    bad_init_kwargs=[{"input_dim": 0}, {"output_dim": 2.5}, {"ids_name": 3}],
)


test_layer_contract = LayerChecks.contract_test(CHECKS)


def test_reads_the_rows_of_its_table_and_scores_in_reverse():
    layer = CheckedEmbedding(6, 3)
    ids = np.array([[0, 5, 2]])
    output = layer(ids)
    table = to_numpy(layer.embeddings)
    assert_allclose(output, table[ids])
    features = np.random.default_rng(0).normal(size=(2, 3)).astype("float32")
    assert_allclose(layer(features, reverse=True), features @ table.T, atol=1e-6)


@pytest.mark.parametrize(
    "ids, received", [([[1, 6]], "max(item_ids)=6"), ([[-1, 2]], "min(item_ids)=-1")]
)
def test_ids_outside_the_table_raise_when_eager(ids, received):
    layer = CheckedEmbedding(6, 3, ids_name="item_ids", name="items")
    message = "`item_ids` must hold ids from 0 to 5, the rows of the embedding 'items'. "
    message += f"Received: {received}"
    with pytest.raises(ValueError, match=re.escape(message)):
        layer(np.array(ids))


def test_compiled_calls_clip_the_ids_into_the_table():
    ids = keras.Input((3,), dtype="int32")
    layer = CheckedEmbedding(6, 3)
    model = keras.Model(ids, layer(ids))
    compiled = keras.backend.backend() != "torch"  # torch models run eagerly here
    model.compile(jit_compile=compiled)
    bad = np.array([[-2, 3, 9]], "int32")
    if not compiled:
        with pytest.raises(ValueError, match=r"Received: min\(inputs\)=-2"):
            model.predict_on_batch(bad)
        return
    table = to_numpy(layer.embeddings)
    assert_allclose(model.predict_on_batch(bad), table[[[0, 3, 5]]])
