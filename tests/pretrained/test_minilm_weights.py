import numpy as np
import pytest

from keras_attn.pretrained import load_minilm_weights


@pytest.fixture(scope="module")
def weights():
    return load_minilm_weights()


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
