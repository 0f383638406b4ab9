import numpy as np
import pytest
from scipy.special import erf

from keras_attn.pretrained import build_minilm_encoder, load_minilm_weights
from keras_attn.testing.reference import layer_norm
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


def _layer_norm(x, gamma, beta):
    return layer_norm(x, gamma, beta, epsilon=1e-12)


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


def test_config_and_vocabulary(weights):
    assert (weights.num_layers, weights.num_heads, weights.hidden_size) == (6, 12, 384)
    assert weights.tensors["embeddings.word_embeddings.weight"].shape == (30522, 384)
    vocab = weights.vocab_path.read_text(encoding="utf-8").splitlines()
    assert len(vocab) == 30522
    assert vocab[101] == "[CLS]" and vocab[102] == "[SEP]"


def test_attention_kernels_reproduce_the_torch_dense_layers(weights):
    kernels = weights.attention_kernels(2)
    x = np.random.default_rng(0).normal(size=(3, 384)).astype("float32")
    torch_query = (
        x @ weights.tensors["encoder.layer.2.attention.self.query.weight"].T
        + weights.tensors["encoder.layer.2.attention.self.query.bias"]
    )
    keras_query = np.einsum("bc,chd->bhd", x, kernels["query"]) + kernels["query_bias"]
    np.testing.assert_allclose(keras_query.reshape(3, 384), torch_query, rtol=1e-5, atol=1e-5)
    context = np.random.default_rng(1).normal(size=(3, 12, 32)).astype("float32")
    torch_output = (
        context.reshape(3, 384) @ weights.tensors["encoder.layer.2.attention.output.dense.weight"].T
    )
    keras_output = np.einsum("bhd,hdc->bc", context, kernels["output"])
    np.testing.assert_allclose(keras_output, torch_output, rtol=1e-5, atol=1e-4)


def test_bad_layer_index(weights):
    with pytest.raises(ValueError, match="Received: layer=6"):
        weights.attention_kernels(6)
