import re

import keras
import numpy as np
import pytest

from keras_attn.layers import CheckedEmbedding, MultiHeadSelfAttention
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


def _compiled(model, jit_compile):
    """`model` compiled as `predict` runs it: eagerly on torch, else traced."""
    model.compile(jit_compile=jit_compile if keras.backend.backend() != "torch" else False)
    return model


@pytest.mark.parametrize("jit_compile", ["auto", True])
def test_compiled_calls_give_nan_for_the_examples_outside_the_table(jit_compile):
    ids = keras.Input((3,), dtype="int32")
    layer = CheckedEmbedding(6, 3)
    model = _compiled(keras.Model(ids, layer(ids)), jit_compile)
    batch = np.array([[-2, 3, 4], [1, 3, 5], [0, 9, 1]], "int32")
    if keras.backend.backend() == "torch":  # torch models run eagerly here
        with pytest.raises(ValueError, match=r"Received: min\(inputs\)=-2"):
            model.predict(batch, verbose=0)
        return
    outputs = model.predict(batch, verbose=0)  # (3, 3, 3)
    assert np.isnan(outputs[[0, 2]]).all()
    assert_allclose(outputs[1], to_numpy(layer.embeddings)[[1, 3, 5]])


def test_each_id_of_one_axis_ids_is_an_example():
    ids = keras.Input((), dtype="int32")
    layer = CheckedEmbedding(6, 3)
    model = _compiled(keras.Model(ids, layer(ids)), True)
    batch = np.array([2, 6, 5], "int32")
    if keras.backend.backend() == "torch":
        with pytest.raises(ValueError, match=r"Received: max\(inputs\)=6"):
            model.predict(batch, verbose=0)
        return
    outputs = model.predict(batch, verbose=0)  # (3, 3)
    table = to_numpy(layer.embeddings)
    assert_allclose(outputs[[0, 2]], table[[2, 5]])
    assert np.isnan(outputs[1]).all()


def test_the_padding_mask_reaches_the_next_layer():
    ids = keras.Input((3,), dtype="int32")
    layer = CheckedEmbedding(6, 3, mask_zero=True)
    pooled = keras.layers.GlobalAveragePooling1D()(layer(ids))  # reads the mask
    model = keras.Model(ids, pooled)
    table = to_numpy(layer.embeddings)
    assert_allclose(model(np.array([[2, 0, 5]])), (table[[2]] + table[[5]]) / 2, atol=1e-6)


def test_a_negative_id_stays_visible_to_the_padding_mask():
    """Masked attention zeroes what the mask hides: the NaN must not be hidden."""
    ids = keras.Input((3,), dtype="int32")
    x = CheckedEmbedding(6, 4, mask_zero=True)(ids)
    model = _compiled(keras.Model(ids, MultiHeadSelfAttention(2, 2)(x)), True)
    batch = np.array([[0, -1, 0], [0, 2, 0]], "int32")  # the first: nothing but -1 to see
    if keras.backend.backend() == "torch":
        with pytest.raises(ValueError, match=r"Received: min\(inputs\)=-1"):
            model.predict(batch, verbose=0)
        return
    outputs = model.predict(batch, verbose=0)  # (2, 3, 4)
    assert np.isnan(outputs[0]).all()
    assert_allclose(outputs[1:], model(batch[1:]), atol=1e-6)
