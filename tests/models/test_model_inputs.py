"""Every embedding and position lookup of the models refuses what its table does not hold."""

import re

import keras
import numpy as np
import pytest

from keras_attn.analysis.topic_structure import build_topic_model
from keras_attn.models import (
    build_bert_encoder,
    build_bsarec,
    build_decoder_language_model,
    build_logsparse_forecaster,
)
from keras_attn.testing.arrays import assert_allclose

pytestmark = pytest.mark.backend_agnostic

SIZES = {"hidden_dim": 8, "num_layers": 1, "num_heads": 2}


def _bert_inputs(token_ids, segment_ids=None):
    token_ids = np.array(token_ids, "int32")
    return {
        "token_ids": token_ids,
        "padding_mask": np.ones_like(token_ids),
        "segment_ids": np.zeros_like(token_ids) if segment_ids is None else np.array(segment_ids),
    }


def _forecaster_inputs(length, hour_of_day=0):
    return {
        "lagged_target": np.zeros((1, length, 1), "float32"),
        "hour_of_day": np.full((1, length), hour_of_day, "int32"),
        "day_of_week": np.zeros((1, length), "int32"),
    }


def _bert():
    return build_bert_encoder(
        10, intermediate_dim=8, max_sequence_length=4, num_segments=2, **SIZES
    )


def _language_model():
    return build_decoder_language_model(10, 4, intermediate_dim=8, **SIZES)


def _forecaster():
    return build_logsparse_forecaster(4, intermediate_dim=8, **SIZES)


@pytest.mark.parametrize(
    "build, inputs, message",
    [
        (_bert, _bert_inputs([[1, 10]]), "`token_ids` must hold ids from 0 to 9, "),
        (_bert, _bert_inputs([[1, 2]], [[0, 2]]), "`segment_ids` must hold ids from 0 to 1, "),
        (_language_model, np.array([[1, 12]]), "`tokens` must hold ids from 0 to 9, "),
        (_forecaster, _forecaster_inputs(4, 30), "`hour_of_day` must hold ids from 0 to 23, "),
        (
            lambda: build_bsarec(20, max_sequence_length=3, **SIZES),
            np.array([[0, 4, 21]]),
            "`item_ids` must hold ids from 0 to 20, the rows of the embedding 'items'. "
            "Received: max(item_ids)=21",
        ),
        (
            lambda: build_topic_model(10, hidden_dim=4),
            {"tokens": np.array([[3, 10]]), "visible": np.ones((1, 2), bool)},
            "`tokens` must hold ids from 0 to 9, ",
        ),
    ],
    ids=["bert_tokens", "bert_segments", "language_model", "forecaster", "bsarec", "topic_model"],
)
def test_ids_outside_a_table_raise(build, inputs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        build()(inputs)


@pytest.mark.parametrize(
    "build, inputs",
    [
        (_bert, _bert_inputs([[1, 2, 3, 4, 5]])),
        (_language_model, np.array([[1, 2, 3, 4, 5]])),
        (_forecaster, _forecaster_inputs(5)),
    ],
    ids=["bert", "language_model", "forecaster"],
)
def test_sequences_longer_than_the_position_table_raise(build, inputs):
    message = "must be at most `max_sequence_length=4`. Received: inputs.shape[1]=5"
    with pytest.raises(ValueError, match=re.escape(message)):
        build()(inputs)


# The first example of each batch holds an id outside a table, the second does not.
BAD_THEN_GOOD = [
    (lambda: build_bsarec(20, max_sequence_length=3, **SIZES), np.array([[0, 4, 21], [0, 4, 20]])),
    (_language_model, np.array([[1, 12, 3], [1, 2, 3]])),
    (_bert, _bert_inputs([[1, 10], [1, 2]])),
    (_bert, _bert_inputs([[1, 2], [1, 2]], [[0, 2], [0, 1]])),
]
BAD_THEN_GOOD_IDS = ["bsarec", "language_model", "bert_tokens", "bert_segments"]


def _rest(batch):
    return keras.tree.map_structure(lambda ids: ids[1:], batch)


@pytest.mark.parametrize("jit_compile", ["auto", True])
@pytest.mark.parametrize("build, batch", BAD_THEN_GOOD, ids=BAD_THEN_GOOD_IDS)
def test_compiled_predict_gives_nan_for_an_example_with_ids_outside_a_table(
    build, batch, jit_compile
):
    model = build()
    if keras.backend.backend() == "torch":  # torch models run eagerly here
        model.compile(jit_compile=False)
        with pytest.raises(ValueError, match="must hold ids from 0 to "):
            model.predict(batch, verbose=0)
        return
    model.compile(jit_compile=jit_compile)
    predicted = keras.tree.flatten(model.predict(batch, verbose=0))
    for output, expected in zip(predicted, keras.tree.flatten(model(_rest(batch))), strict=True):
        assert np.isnan(output[0]).all()
        assert_allclose(output[1:], expected, atol=1e-5)


@pytest.mark.parametrize("build, batch", BAD_THEN_GOOD[:3], ids=BAD_THEN_GOOD_IDS[:3])
def test_fit_and_evaluate_show_a_nan_loss_for_ids_outside_a_table(build, batch):
    model = build()
    predicted = model(_rest(batch))
    if isinstance(predicted, dict):  # BERT: a loss on its sentence embedding
        loss = {"sentence_embedding": "mse"}
        targets = {"sentence_embedding": np.zeros((2, *predicted["sentence_embedding"].shape[1:]))}
    else:
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        targets = np.ones((2, *predicted.shape[1:-1]), "int32")
    torch = keras.backend.backend() == "torch"  # torch models run eagerly here
    model.compile(optimizer="sgd", loss=loss, jit_compile=False if torch else "auto")
    if torch:
        weights = model.get_weights()
        for run in (model.fit, model.evaluate):
            with pytest.raises(ValueError, match="must hold ids from 0 to "):
                run(batch, targets, verbose=0)
        for weight, before in zip(model.get_weights(), weights, strict=True):
            np.testing.assert_array_equal(weight, before)
        return
    assert np.isnan(model.evaluate(batch, targets, verbose=0))
    assert np.isnan(model.fit(batch, targets, verbose=0).history["loss"][0])


def test_a_served_model_gives_nan_for_ids_and_lengths_outside_its_tables(tmp_path):
    if keras.backend.backend() == "torch":
        pytest.skip("SavedModel export runs on the TensorFlow and JAX backends.")
    import tensorflow as tf

    model = _language_model()  # 10 tokens, 4 positions, any length
    model.export(str(tmp_path / "model"), format="tf_saved_model", verbose=False)
    served = tf.saved_model.load(str(tmp_path / "model"))
    batch = np.array([[1, 12, 3], [1, 2, 3]], "int32")
    outputs = served.serve(batch).numpy()
    assert np.isnan(outputs[0]).all()
    assert_allclose(outputs[1:], model(batch[1:]), atol=1e-5)
    assert np.isnan(served.serve(np.ones((2, 5), "int32")).numpy()).all()
