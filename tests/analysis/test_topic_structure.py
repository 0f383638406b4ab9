"""Tests of the topic-structure analysis (Li, Li & Risteski, 2023)."""

import keras
import numpy as np
import pytest

from keras_attn.analysis import (
    TopicStatisticsCallback,
    attention_topic_statistics,
    block_gap,
    build_topic_model,
    generate_lda_documents,
    mask_tokens,
    topic_statistics,
    value_word_matrix,
)
from keras_attn.analysis.topic_structure import FIRST_WORD_ID, MASK_ID, PAD_ID
from keras_attn.layers import MultiHeadSelfAttention


def test_lda_documents_follow_the_generative_model():
    corpus = generate_lda_documents(300, num_topics=4, words_per_topic=3, alpha=0.1, seed=5)
    assert corpus.tokens.shape == (300, 150) and corpus.vocabulary_size == 14
    assert corpus.lengths.min() >= 100 and corpus.lengths.max() <= 150
    for row, length in zip(corpus.tokens, corpus.lengths, strict=True):
        assert np.all(row[:length] >= FIRST_WORD_ID) and np.all(row[length:] == PAD_ID)
    np.testing.assert_allclose(corpus.topic_proportions.sum(axis=1), 1.0)
    assert corpus.word_topics.tolist() == [-1, -1, 0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    # Topic counts per document follow θ: with α = 0.1 most documents are dominated by one topic.
    topics = corpus.word_topics[corpus.tokens]
    shares = np.stack([(topics == t).sum(1) for t in range(4)], 1) / corpus.lengths[:, None]
    assert np.abs(shares - corpus.topic_proportions).max() < 0.2
    again = generate_lda_documents(300, num_topics=4, words_per_topic=3, alpha=0.1, seed=5)
    np.testing.assert_array_equal(again.tokens, corpus.tokens)


def test_masking_is_80_10_10_and_skips_padding():
    tokens = np.full((400, 200), 7, dtype=np.int32)
    tokens[:, 150:] = PAD_ID
    inputs, targets, weights = mask_tokens(tokens, 102, np.random.default_rng(0))
    chosen = weights > 0
    assert not chosen[:, 150:].any()
    assert abs(chosen[:, :150].mean() - 0.15) < 0.005
    np.testing.assert_array_equal(targets, tokens)
    assert np.all(inputs[~chosen] == tokens[~chosen])
    shown = inputs[chosen]
    assert abs(np.mean(shown == MASK_ID) - 0.8) < 0.02
    kept = np.mean(shown == 7)  # 10% unchanged plus random draws of word 7
    assert abs(kept - (0.1 + 0.1 / 100)) < 0.02


def test_attention_statistics_by_hand():
    # One document: words of topics [0, 0, 1] and padding; topic ids 2, 3 -> 0 and 4 -> 1.
    topics = np.array([-1, -1, 0, 0, 1])
    tokens = np.array([[2, 3, 4, 0]])
    weights = np.array(
        [
            [
                [0.2, 0.5, 0.3, 0.0],  # query topic 0: same key 1 (0.5), different key 2 (0.3)
                [0.6, 0.1, 0.3, 0.0],  # query topic 0: same key 0 (0.6), different key 2 (0.3)
                [0.25, 0.35, 0.4, 0.0],  # query topic 1: no same key; different 0.25, 0.35
            ]
            + [[0.0] * 4]
        ]
    )
    stats = attention_topic_statistics(weights, tokens, topics)
    assert stats["same_topic"] == pytest.approx((0.5 + 0.6) / 2)
    assert stats["different_topic"] == pytest.approx((0.3 + 0.3 + 0.3) / 3)
    assert stats["uniform"] == pytest.approx(1 / 3)


def test_block_gap():
    topics = np.array([-1, 0, 0, 1, 1])
    blocks = np.kron(np.eye(2), np.ones((2, 2)))
    matrix = np.zeros((5, 5))
    matrix[1:, 1:] = blocks
    assert block_gap(matrix, topics) == pytest.approx(1.0 / blocks.std())
    assert block_gap(np.ones((5, 5)), topics) == 0.0


def test_model_is_one_attention_layer_without_residual():
    model = build_topic_model(12, hidden_dim=6)
    assert [type(layer).__name__ for layer in model.layers[1:]] == [
        "Embedding",
        "MultiHeadSelfAttention",
        "Dense",
    ]
    attention = model.get_layer("attention")
    assert isinstance(attention, MultiHeadSelfAttention) and attention.num_heads == 1
    tokens = np.array([[2, 5, 7, 0]], "int32")
    embedded = model.get_layer("token_embedding")(tokens)
    expected = model.get_layer("decoder")(attention(embedded, mask=tokens != 0))
    np.testing.assert_allclose(model(tokens), expected, atol=1e-6)
    matrix = value_word_matrix(model)
    assert matrix.shape == (12, 12)


def test_uniform_attention_gives_one_over_n_and_callback_records():
    corpus = generate_lda_documents(8, length_range=(120, 120), seed=2)
    model = build_topic_model(corpus.vocabulary_size, hidden_dim=8)
    attention = model.get_layer("attention")
    attention.query_dense.kernel.assign(np.zeros(attention.query_dense.kernel.shape))
    stats = topic_statistics(model, corpus.tokens, corpus.word_topics)
    assert stats["attention_uniform"] == pytest.approx(1 / 120)
    assert stats["attention_same_topic"] == pytest.approx(1 / 120, rel=1e-5)
    assert stats["attention_different_topic"] == pytest.approx(1 / 120, rel=1e-5)
    callback = TopicStatisticsCallback(corpus.tokens[:2], corpus.word_topics, steps=[0, 2])
    inputs, targets, weights = mask_tokens(
        corpus.tokens, corpus.vocabulary_size, np.random.default_rng(0)
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(inputs, targets, sample_weight=weights, batch_size=2, verbose=0, callbacks=[callback])
    assert [record["step"] for record in callback.history] == [0, 2]


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: num_documents=0"):
        generate_lda_documents(0)
    with pytest.raises(ValueError, match="Received: alpha=0"):
        generate_lda_documents(5, alpha=0)
    with pytest.raises(ValueError, match="Received: length_range"):
        generate_lda_documents(5, length_range=(10, 5))
    with pytest.raises(ValueError, match="Received: rate=1.5"):
        mask_tokens(np.ones((1, 3)), 10, np.random.default_rng(0), rate=1.5)
    with pytest.raises(ValueError, match="Received: steps"):
        TopicStatisticsCallback(np.ones((1, 3)), np.zeros(4), steps=[])
