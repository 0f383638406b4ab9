"""Every embedding and position lookup of the models refuses what its table does not hold."""

import re

import numpy as np
import pytest

from keras_attn.analysis.topic_structure import build_topic_model
from keras_attn.models import (
    build_bert_encoder,
    build_bsarec,
    build_decoder_language_model,
    build_logsparse_forecaster,
)

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
