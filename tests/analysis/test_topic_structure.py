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
    train_topic_model,
    value_word_matrix,
    word_embeddings,
)
from keras_attn.analysis.topic_structure import FIRST_WORD_ID, MASK_ID, PAD_ID, take_off_step
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
    assert stats["same_topic_over_uniform"] == pytest.approx(3 * (0.5 + 0.6) / 2)
    assert stats["different_topic_over_uniform"] == pytest.approx(3 * 0.3)


def test_block_gap():
    topics = np.array([-1, 0, 0, 1, 1])
    blocks = np.kron(np.eye(2), np.ones((2, 2)))
    matrix = np.zeros((5, 5))
    matrix[1:, 1:] = blocks
    assert block_gap(matrix, topics) == pytest.approx(1.0 / blocks.std())
    assert block_gap(np.ones((5, 5)), topics) == 0.0


def _inputs(tokens):
    return {"tokens": tokens, "visible": tokens != PAD_ID}


def test_model_is_one_attention_layer_without_residual():
    model = build_topic_model(12, hidden_dim=6)
    assert [type(layer).__name__ for layer in model.layers[2:]] == [
        "Functional",
        "MultiHeadSelfAttention",
        "Dense",
    ]
    attention = model.get_layer("attention")
    assert isinstance(attention, MultiHeadSelfAttention) and attention.num_heads == 1
    tokens = np.array([[2, 5, 7, 0]], "int32")
    embedded = model.get_layer("embedding")(tokens)
    expected = model.get_layer("decoder")(attention(embedded, mask=tokens != 0))
    np.testing.assert_allclose(model(_inputs(tokens)), expected, atol=1e-6)
    table = model.get_layer("embedding").get_layer("token_embedding").embeddings.numpy()
    np.testing.assert_array_equal(word_embeddings(model), table)
    assert value_word_matrix(model).shape == (12, 12)


def test_hidden_positions_are_not_attended_to():
    model = build_topic_model(12, hidden_dim=6)
    tokens = np.array([[2, 5, 7, 9]], "int32")
    visible = np.array([[True, False, True, False]])
    logits = keras.ops.convert_to_numpy(model({"tokens": tokens, "visible": visible}))
    # Other words at the hidden positions leave the visible positions' outputs
    # unchanged: their keys are positions 0 and 2 only.
    changed = tokens.copy()
    changed[0, [1, 3]] = [8, 3]
    again = keras.ops.convert_to_numpy(model({"tokens": changed, "visible": visible}))
    np.testing.assert_allclose(again[:, [0, 2]], logits[:, [0, 2]], atol=1e-6)
    assert not np.allclose(again[:, 1], logits[:, 1])  # a hidden query still reads its own word


def test_official_configuration_matches_a_numpy_model():
    vocabulary = 10
    model = build_topic_model(vocabulary, configuration="official")
    tokens = np.array([[2, 5, 7, 9, 0], [3, 3, 4, 0, 0]], "int32")
    visible = np.array([[1, 0, 1, 1, 0], [1, 1, 1, 0, 0]], bool)
    segment = model.get_layer("embedding").get_layer("segment").embeddings.numpy()[0]
    x = np.eye(vocabulary)[tokens] + segment  # (batch, length, vocabulary)
    x = (x - x.mean(-1, keepdims=True)) / np.sqrt(x.var(-1, keepdims=True) + 1e-12)
    value = model.get_layer("attention").value_dense
    values = x @ value.kernel.numpy()[:, 0] + value.bias.numpy()[0]  # (batch, length, dim)
    # Uniform attention over the visible keys, identity output and decoder.
    mean = (visible[:, :, None] * values).sum(1) / visible.sum(1)[:, None]  # (batch, dim)
    expected = np.broadcast_to(mean[:, None], values.shape)  # every query alike
    np.testing.assert_allclose(
        model({"tokens": tokens, "visible": visible}), expected, rtol=1e-4, atol=1e-5
    )


def test_official_configuration_keeps_its_frozen_parts_through_training():
    corpus = generate_lda_documents(
        80, num_topics=3, words_per_topic=4, length_range=(20, 20), seed=3
    )
    model, history = train_topic_model(
        corpus, corpus.tokens[:4], epochs=1, batch_size=20, configuration="official"
    )
    vocabulary = corpus.vocabulary_size
    attention = model.get_layer("attention")
    for variable in (
        attention.query_dense.kernel,
        attention.query_dense.bias,
        attention.key_dense.kernel,
        attention.key_dense.bias,
        attention.output_dense.bias,
    ):
        np.testing.assert_array_equal(variable.numpy(), 0.0)
    np.testing.assert_array_equal(attention.output_dense.kernel.numpy()[0], np.eye(vocabulary))
    np.testing.assert_array_equal(model.get_layer("decoder").kernel.numpy(), np.eye(vocabulary))
    one_hot = model.get_layer("embedding").get_layer("token_embedding").embeddings.numpy()
    np.testing.assert_array_equal(one_hot, np.eye(vocabulary))
    trainable = sorted(variable.path for variable in model.trainable_weights)
    assert trainable == [
        "attention/value/bias",
        "attention/value/kernel",
        "embedding_norm/beta",
        "embedding_norm/gamma",
        "segment/embeddings",
    ]
    # The attention stays uniform, and the value map did learn.
    for record in history:
        assert record["attention_same_topic"] == pytest.approx(
            record["attention_uniform"], rel=1e-4
        )
    assert history[-1]["value_block_gap"] != history[0]["value_block_gap"]
    assert [record["step"] for record in history] == list(range(5))


def test_statistics_against_numpy_on_a_tiny_model():
    corpus = generate_lda_documents(3, num_topics=2, words_per_topic=3, length_range=(5, 7))
    model = build_topic_model(corpus.vocabulary_size, hidden_dim=4)
    topics = corpus.word_topics
    embedding = model.get_layer("embedding").get_layer("token_embedding").embeddings.numpy()
    attention = model.get_layer("attention")
    query = attention.query_dense.kernel.numpy()[:, 0]
    key = attention.key_dense.kernel.numpy()[:, 0]
    value = attention.value_dense.kernel.numpy()[:, 0]
    output = attention.output_dense.kernel.numpy()[0]
    decoder = model.get_layer("decoder").kernel.numpy()
    words = np.flatnonzero(topics >= 0)
    same = topics[words][:, None] == topics[words][None, :]
    inner = (embedding @ embedding.T)[np.ix_(words, words)]
    value_map = (embedding @ value @ output @ decoder)[np.ix_(words, words)]
    off = ~np.eye(len(words), dtype=bool)
    gap = (value_map[same & off].mean() - value_map[~same].mean()) / value_map.std()
    # Attention: masked softmax of q k / sqrt(d) per document, then per-query means.
    same_means, different_means, inverse_lengths, same_n, different_n = [], [], [], [], []
    for row, length in zip(corpus.tokens, corpus.lengths, strict=True):
        x = embedding[row[:length]]
        logits = (x @ query) @ (x @ key).T / np.sqrt(4)
        weights = np.exp(logits - logits.max(1, keepdims=True))
        weights /= weights.sum(1, keepdims=True)
        word_topics = topics[row[:length]]
        for i in range(length):
            others = np.arange(length) != i
            same_keys = others & (word_topics == word_topics[i])
            different_keys = others & (word_topics != word_topics[i])
            if same_keys.any():
                same_means.append(weights[i, same_keys].mean())
                same_n.append(length * weights[i, same_keys].mean())
            if different_keys.any():
                different_means.append(weights[i, different_keys].mean())
                different_n.append(length * weights[i, different_keys].mean())
        inverse_lengths.append(1 / length)
    statistics = topic_statistics(model, corpus.tokens, topics)
    expected = {
        "embedding_same_topic": inner[same & off].mean(),
        "embedding_different_topic": inner[~same].mean(),
        "attention_same_topic": np.mean(same_means),
        "attention_different_topic": np.mean(different_means),
        "attention_uniform": np.mean(inverse_lengths),
        "attention_same_over_uniform": np.mean(same_n),
        "attention_different_over_uniform": np.mean(different_n),
        "value_block_gap": gap,
    }
    assert statistics == pytest.approx(expected, rel=1e-4, abs=1e-6)


def test_uniform_attention_gives_one_over_n_and_callback_records():
    corpus = generate_lda_documents(8, length_range=(120, 120), seed=2)
    model = build_topic_model(corpus.vocabulary_size, hidden_dim=8)
    attention = model.get_layer("attention")
    attention.query_dense.kernel.assign(np.zeros(attention.query_dense.kernel.shape))
    stats = topic_statistics(model, corpus.tokens, corpus.word_topics)
    assert stats["attention_uniform"] == pytest.approx(1 / 120)
    assert stats["attention_same_topic"] == pytest.approx(1 / 120, rel=1e-5)
    assert stats["attention_different_topic"] == pytest.approx(1 / 120, rel=1e-5)
    assert stats["attention_same_over_uniform"] == pytest.approx(1.0, rel=1e-5)
    callback = TopicStatisticsCallback(corpus.tokens[:2], corpus.word_topics, steps=[0, 2])
    inputs, targets, weights = mask_tokens(
        corpus.tokens, corpus.vocabulary_size, np.random.default_rng(0)
    )
    model.compile("adam", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    model.fit(
        _inputs(inputs),
        targets,
        sample_weight=weights,
        batch_size=2,
        verbose=0,
        callbacks=[callback],
    )
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
    with pytest.raises(ValueError, match="Received: configuration='frozen'"):
        build_topic_model(12, configuration="frozen")
    with pytest.raises(ValueError, match="Received: hidden_dim=8"):
        build_topic_model(12, hidden_dim=8, configuration="official")
    with pytest.raises(ValueError, match="Received: steps"):
        TopicStatisticsCallback(np.ones((1, 3)), np.zeros(4), steps=[])


def test_take_off_is_the_first_step_at_half_the_final_value():
    history = [{"step": s, "x": v} for s, v in [(0, 0.0), (2, 1.0), (4, 2.5), (8, 4.0)]]
    assert take_off_step(history, lambda r: r["x"]) == 4
