import keras
import numpy as np
import pytest
import tensorflow as tf
from scipy.special import erf

from keras_attn.layers import TransformerBlock
from keras_attn.models import build_bert_encoder, build_minilm_encoder
from keras_attn.pretrained import load_minilm_weights
from keras_attn.text import WordPieceTokenizer

SENTENCES = ["A man is eating food.", "A man is eating a piece of bread."]


@pytest.fixture(scope="module")
def weights():
    return load_minilm_weights()


@pytest.fixture(scope="module")
def minilm(weights):
    return build_minilm_encoder(
        weights, output_hidden_states=True, output_attention_scores=True, head_mask=True
    )


@pytest.fixture(scope="module")
def tokenizer(weights):
    return WordPieceTokenizer(weights.vocab_path, sequence_length=256)


def _layer_norm(x, gamma, beta, epsilon=1e-12):
    mean = x.mean(-1, keepdims=True)
    variance = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * gamma + beta


def _dense(x, tensors, prefix):
    return x @ tensors[f"{prefix}.weight"].T + tensors[f"{prefix}.bias"]


def bert_reference(tensors, token_ids, padding_mask, num_heads, head_mask):
    """BERT forward pass in float64 numpy from the PyTorch-layout tensors."""
    tensors = {name: value.astype("float64") for name, value in tensors.items()}
    length = token_ids.shape[1]
    x = (
        tensors["embeddings.word_embeddings.weight"][token_ids]
        + tensors["embeddings.position_embeddings.weight"][:length]
        + tensors["embeddings.token_type_embeddings.weight"][0]
    )
    x = _layer_norm(x, tensors["embeddings.LayerNorm.weight"], tensors["embeddings.LayerNorm.bias"])
    states, attention = [x], []
    for index in range(head_mask.shape[1]):
        prefix = f"encoder.layer.{index}"

        def heads(name, x=x, prefix=prefix):
            projected = _dense(x, tensors, f"{prefix}.attention.self.{name}")
            return projected.reshape(*x.shape[:2], num_heads, -1).transpose(0, 2, 1, 3)

        query, key, value = heads("query"), heads("key"), heads("value")
        logits = query @ key.transpose(0, 1, 3, 2) / np.sqrt(query.shape[-1])
        logits = np.where(padding_mask[:, None, None, :] > 0, logits, -np.inf)
        weights = np.exp(logits - logits.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        context = (weights @ value) * head_mask[:, index, :, None, None]
        context = context.transpose(0, 2, 1, 3).reshape(x.shape)
        attended = _dense(context, tensors, f"{prefix}.attention.output.dense")
        x = _layer_norm(
            x + attended,
            tensors[f"{prefix}.attention.output.LayerNorm.weight"],
            tensors[f"{prefix}.attention.output.LayerNorm.bias"],
        )
        hidden = _dense(x, tensors, f"{prefix}.intermediate.dense")
        hidden = 0.5 * hidden * (1.0 + erf(hidden / np.sqrt(2.0)))
        x = _layer_norm(
            x + _dense(hidden, tensors, f"{prefix}.output.dense"),
            tensors[f"{prefix}.output.LayerNorm.weight"],
            tensors[f"{prefix}.output.LayerNorm.bias"],
        )
        states.append(x)
        attention.append(weights)
    return states, attention


def _minilm_inputs(tokenizer, head_mask=None):
    inputs = tokenizer(SENTENCES)
    inputs["head_mask"] = np.ones((2, 6, 12), "float32") if head_mask is None else head_mask
    return inputs


def test_reference_sentence_similarity(minilm, tokenizer):
    embeddings = np.asarray(minilm(_minilm_inputs(tokenizer))["sentence_embedding"])
    np.testing.assert_allclose(np.linalg.norm(embeddings, axis=-1), 1.0, atol=1e-6)
    # sentence-transformers gives 0.7553 for this pair.
    assert float(embeddings[0] @ embeddings[1]) == pytest.approx(0.7553, abs=5e-4)


def test_layers_match_numpy_reference(minilm, tokenizer, weights):
    head_mask = np.ones((2, 6, 12), "float32")
    head_mask[0, 2, [1, 5]] = 0.0
    head_mask[1, 4, 7] = 0.0
    inputs = _minilm_inputs(tokenizer, head_mask)
    outputs = minilm(inputs)
    states, attention = bert_reference(
        weights.tensors, inputs["token_ids"], inputs["padding_mask"], 12, head_mask
    )
    for keras_state, reference_state in zip(
        np.moveaxis(outputs["hidden_states"], 1, 0), states, strict=True
    ):
        np.testing.assert_allclose(keras_state, reference_state, atol=2e-4)
    for keras_weights, reference_weights in zip(
        np.moveaxis(outputs["attention_scores"], 1, 0), attention, strict=True
    ):
        np.testing.assert_allclose(keras_weights, reference_weights, atol=1e-5)
    np.testing.assert_allclose(outputs["sequence_output"], states[-1], atol=2e-4)


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
    assert isinstance(block, TransformerBlock) and not block.norm_first
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
