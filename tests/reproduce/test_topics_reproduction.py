import keras
import numpy as np
import pytest

from keras_attn.pretrained import load_minilm_weights
from keras_attn.reproduce import topics


@pytest.mark.slow
@pytest.mark.backend_agnostic
def test_minilm_attention_statistics_run_on_torch():
    """The attention scores are read with `convert_to_numpy`: torch tensors that need grad."""
    if keras.backend.backend() != "torch":
        pytest.skip("The small topics run covers TensorFlow.")
    weights = load_minilm_weights()
    vocabulary = weights.vocab_path.read_text(encoding="utf-8").splitlines()
    ids = {token: index for index, token in enumerate(vocabulary)}
    vocabulary_topics = np.full(len(vocabulary), -1)
    for topic, words in enumerate([["she", "her"], ["he", "his"]]):
        vocabulary_topics[[ids[word] for word in words]] = topic
    per_layer = topics._minilm_attention(weights, vocabulary_topics, 2, 0, words_per_passage=30)
    assert len(per_layer) == weights.num_layers
    for statistics in per_layer:
        assert sorted(statistics) == ["different_topic", "same_topic", "uniform"]
        assert all(0.0 < value < 1.0 for value in statistics.values())
