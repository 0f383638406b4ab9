import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.layers import TransformerBlock
from keras_attn.models import build_bert_encoder


def _small_encoder(**kwargs):
    keras.utils.set_random_seed(0)
    return build_bert_encoder(
        50, num_layers=2, num_heads=2, hidden_dim=8, intermediate_dim=16, **kwargs
    )


def _small_inputs():
    rng = np.random.default_rng(0)
    padding_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "int32")
    return {
        "token_ids": rng.integers(1, 50, (2, 5)).astype("int32") * padding_mask,
        "padding_mask": padding_mask,
        "segment_ids": np.zeros((2, 5), "int32"),
    }


def test_padding_does_not_change_real_tokens():
    model = _small_encoder()
    inputs = _small_inputs()
    short = {name: value[1:, :3] for name, value in inputs.items()}
    np.testing.assert_allclose(
        model(inputs)["sentence_embedding"][1], model(short)["sentence_embedding"][0], atol=1e-6
    )


def test_save_reload_xla_and_savedmodel(tmp_path):
    model = _small_encoder(output_hidden_states=True, output_attention_scores=True, head_mask=True)
    inputs = {**_small_inputs(), "head_mask": np.ones((2, 2, 2), "float32")}
    expected = model(inputs)
    model.save(tmp_path / "encoder.keras")
    reloaded = keras.saving.load_model(tmp_path / "encoder.keras")
    np.testing.assert_allclose(
        reloaded(inputs)["sentence_embedding"], expected["sentence_embedding"], atol=1e-6
    )
    compiled = tf.function(model, jit_compile=True)
    np.testing.assert_allclose(
        compiled(inputs)["attention_scores"], expected["attention_scores"], atol=1e-5
    )
    model.export(tmp_path / "saved_model", format="tf_saved_model")
    restored = tf.saved_model.load(str(tmp_path / "saved_model"))
    served = restored.serve({name: tf.constant(value) for name, value in inputs.items()})
    np.testing.assert_allclose(
        served["sentence_embedding"], expected["sentence_embedding"], atol=1e-5
    )


def test_layers_are_post_norm_blocks_with_bert_dropout():
    """Dropout acts in training only; at inference the model equals the dropout-free one."""
    model = _small_encoder(dropout=0.5)
    plain = _small_encoder()
    plain.set_weights(model.get_weights())
    block = model.get_layer("layer_1")
    assert isinstance(block, TransformerBlock) and not block.normalize_first
    assert (block.dropout, block.attention_dropout, block.mlp_hidden_dropout) == (0.5, 0.5, 0.0)
    inputs = _small_inputs()
    expected = plain(inputs)["sequence_output"]
    np.testing.assert_allclose(model(inputs)["sequence_output"], expected, atol=1e-6)
    trained = model(inputs, training=True)["sequence_output"]
    assert not np.allclose(trained, expected, atol=1e-3)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"num_layers": 0}, "Received: num_layers=0"),
        ({"dropout": 1.0}, "Received: dropout=1.0"),
        ({"hidden_dim": 9}, "Received: hidden_dim=9"),
    ],
)
def test_bad_arguments(kwargs, message):
    arguments = {
        "vocabulary_size": 50,
        "num_layers": 2,
        "num_heads": 2,
        "hidden_dim": 8,
        "intermediate_dim": 16,
    }
    with pytest.raises(ValueError, match=message):
        build_bert_encoder(**{**arguments, **kwargs})
