"""Tests of the feed-forward key-value memory analysis (Geva et al., 2021)."""

import warnings

import keras
import numpy as np
import pytest

from keras_attn.analysis import (
    FeedForwardSite,
    analyze_memories,
    memory_coefficients,
    transformer_block_sites,
    value_top_tokens,
    value_vocabulary_distributions,
)
from keras_attn.models import build_decoder_language_model

DIM, MEMORIES, LENGTH, EXAMPLES = 8, 4, 6, 20
# Planted triggers per key: (example, position, coefficient), best first.
PLANTED = {
    0: [(3, 2, 5.0), (11, 0, 4.0), (17, 5, 3.0)],
    1: [(0, 4, 6.0), (7, 1, 2.5), (19, 3, 2.0)],
    2: [(12, 5, 4.5), (4, 0, 3.5), (8, 2, 1.5)],
    3: [(15, 1, 7.0), (2, 3, 6.5), (9, 4, 1.2)],
}
VALUE_TOKENS = [5, 6, 7, 0]  # the top token of each planted value
DECOY = (6, 0, 100.0)  # a huge coefficient of key 0 at an invalid (padding) position


def planted_ffn():
    """FF(x) = relu(x K) V with key i = e_i and value i = e_{VALUE_TOKENS[i]}."""
    inputs = keras.Input((None, DIM))
    hidden = keras.layers.Dense(MEMORIES, activation="relu", name="hidden")
    output = keras.layers.Dense(DIM, name="output")
    model = keras.Model(inputs, output(hidden(inputs)))
    keys = np.eye(DIM, MEMORIES, dtype="float32")  # (dim, memories): column i = e_i
    values = np.eye(DIM, dtype="float32")[VALUE_TOKENS]  # (memories, dim)
    hidden.set_weights([keys, np.zeros(MEMORIES, "float32")])
    output.set_weights([values, np.zeros(DIM, "float32")])
    return model, FeedForwardSite(hidden, output, name="planted")


def planted_corpus():
    rng = np.random.default_rng(0)
    x = rng.uniform(-0.1, 0.1, size=(EXAMPLES, LENGTH, DIM)).astype("float32")
    next_tokens = rng.integers(0, DIM, size=(EXAMPLES, LENGTH))
    valid = np.ones((EXAMPLES, LENGTH), bool)
    for key, triggers in PLANTED.items():
        for example, position, scale in triggers:
            x[example, position] = scale * np.eye(DIM)[key]
    example, position, scale = DECOY
    x[example, position] = scale * np.eye(DIM)[0]
    valid[example, position] = False
    for key in (0, 1, 2):  # the top trigger of keys 0-2 is followed by the value's token
        example, position, _ = PLANTED[key][0]
        next_tokens[example, position] = VALUE_TOKENS[key]
    example, position, _ = PLANTED[3][0]
    next_tokens[example, position] = 1  # key 3 disagrees
    return x, next_tokens, valid


def batches(x, next_tokens, valid, size=6):
    return [
        (x[i : i + size], next_tokens[i : i + size], valid[i : i + size])
        for i in range(0, len(x), size)
    ]


def test_planted_memories_are_recovered_exactly():
    model, site = planted_ffn()
    x, next_tokens, valid = planted_corpus()
    analysis = analyze_memories(
        model, batches(x, next_tokens, valid), np.eye(DIM), sites=[site], top_k=3
    )
    for key, triggers in PLANTED.items():
        assert analysis.trigger_examples[0][key].tolist() == [t[0] for t in triggers]
        assert analysis.trigger_positions[0][key].tolist() == [t[1] for t in triggers]
        np.testing.assert_allclose(analysis.trigger_scores[0][key], [t[2] for t in triggers])
    assert analysis.value_top_tokens[0].tolist() == VALUE_TOKENS
    assert analysis.agreement_rate.tolist() == [0.75]
    assert analysis.random_baseline == 1 / DIM
    assert (analysis.num_examples, analysis.num_positions) == (EXAMPLES, EXAMPLES * LENGTH - 1)
    prefix, token, score = analysis.trigger_prefixes(0, 1, x)[0]
    np.testing.assert_array_equal(prefix, x[0, :5])
    assert (token, score) == (VALUE_TOKENS[1], 6.0)


def test_streaming_does_not_depend_on_batch_size():
    model, site = planted_ffn()
    x, next_tokens, valid = planted_corpus()
    results = [
        analyze_memories(model, batches(x, next_tokens, valid, size), np.eye(DIM), [site], 3)
        for size in (1, 7, EXAMPLES)
    ]
    for other in results[1:]:
        np.testing.assert_array_equal(other.trigger_examples[0], results[0].trigger_examples[0])
        np.testing.assert_allclose(other.active_fraction, results[0].active_fraction)
        np.testing.assert_allclose(other.compromise, results[0].compromise)


def reference_position_statistics(x, valid, keys, values, bias, embedding, readout):
    """Loop-by-loop numpy reference of the per-position statistics (no residual layer)."""
    rows = {"active": [], "zero": [], "sum_zero": [], "kept": [], "override": [], "compromise": []}
    for residual in x[valid]:
        m = np.maximum(residual @ keys, 0.0)
        ffn = m @ values + bias
        sum_top = np.argmax((m @ values) @ embedding)
        memory_tops = {int(np.argmax(m[i] * values[i] @ embedding)) for i in range(len(m)) if m[i]}
        rows["active"].append(np.mean(m > 0))
        rows["sum_zero"].append(sum_top not in memory_tops)
        top_r, top_o, top_y = (np.argmax(readout(h)) for h in (residual, ffn, residual + ffn))
        rows["zero"].append(top_y not in memory_tops)  # the official definition
        rows["kept"].append(top_y == top_r)
        rows["override"].append(top_y != top_r and top_y == top_o)
        rows["compromise"].append(top_y != top_r and top_y != top_o)
    return {name: np.mean(values_) for name, values_ in rows.items()}


@pytest.mark.parametrize("nonlinear_readout", [False, True])
def test_position_statistics_match_a_loop_reference(nonlinear_readout):
    keras.utils.set_random_seed(3)  # the Dense weights, whatever ran before in this process
    rng = np.random.default_rng(3)
    inputs = keras.Input((None, 5))
    hidden = keras.layers.Dense(12, activation="relu", use_bias=False)
    output = keras.layers.Dense(5, bias_initializer="random_normal")
    model = keras.Model(inputs, output(hidden(inputs)))
    x = rng.normal(size=(9, 4, 5)).astype("float32")
    valid = rng.random((9, 4)) > 0.2
    embedding = rng.normal(size=(5, 7))
    site = FeedForwardSite(hidden, output)
    readout = (lambda h: np.tanh(h) @ embedding) if nonlinear_readout else None
    analysis = analyze_memories(
        model, batches(x, np.zeros((9, 4), int), valid, 4), embedding, [site], readout=readout
    )
    keys, bias = (keras.ops.convert_to_numpy(w) for w in (hidden.kernel, output.bias))
    expected = reference_position_statistics(
        x, valid, keys, site.values, bias, embedding, readout or (lambda h: h @ embedding)
    )
    np.testing.assert_allclose(analysis.active_fraction, [expected["active"]], rtol=1e-6)
    np.testing.assert_allclose(analysis.zero_agreement_rate, [expected["zero"]])
    np.testing.assert_allclose(analysis.memory_sum_zero_agreement_rate, [expected["sum_zero"]])
    assert expected["zero"] != expected["sum_zero"]  # the two definitions differ here
    np.testing.assert_allclose(analysis.residual_kept, [expected["kept"]])
    np.testing.assert_allclose(analysis.ffn_override, [expected["override"]])
    np.testing.assert_allclose(analysis.compromise, [expected["compromise"]])


def test_next_token_rank_and_the_shuffled_null():
    model, site = planted_ffn()
    x, next_tokens, valid = planted_corpus()
    analysis = analyze_memories(
        model, batches(x, next_tokens, valid), np.eye(DIM), [site], 3, permutations=50
    )
    # Values are one-hot, so every other token ties at rank 1..7 in index order.
    # Key 3 (value token 0) is followed by token 1: rank 1. The others rank 0.
    assert analysis.next_token_rank.tolist() == [0.0]
    # Permuted, a key agrees only if its trigger goes back to itself.
    assert 0.0 <= analysis.shuffled_agreement_rate[0] < analysis.agreement_rate[0]
    assert analysis.shuffled_next_token_rank[0] > 0.0
    low, high = analysis.intervals["agreement_rate"][0]
    assert low <= analysis.agreement_rate[0] <= high and 0.0 <= low < high <= 1.0
    assert 1 / 51 <= analysis.agreement_p_value[0] <= 1.0
    summary = analysis.summary()
    assert summary["next_token_rank"] == [0.0]
    assert set(summary["intervals"]) >= {"zero_agreement_rate", "shuffled_agreement_rate"}


def test_bootstrap_intervals_bracket_the_rate_and_shrink_with_more_examples():
    rng = np.random.default_rng(0)
    inputs = keras.Input((None, 5))
    hidden = keras.layers.Dense(12, activation="relu")
    output = keras.layers.Dense(5)
    model = keras.Model(inputs, output(hidden(inputs)))
    site = FeedForwardSite(hidden, output)
    embedding = rng.normal(size=(5, 7))
    x = rng.normal(size=(40, 3, 5)).astype("float32")
    widths = []
    for copies in (1, 16):
        data = np.concatenate([x] * copies)
        analysis = analyze_memories(
            model,
            batches(data, np.zeros(data.shape[:2], int), np.ones(data.shape[:2], bool), 40),
            embedding,
            [site],
            resamples=400,
        )
        low, high = analysis.intervals["active_fraction"][0]
        assert low <= analysis.active_fraction[0] <= high
        widths.append(high - low)
    # 16 times the examples: the interval is about 4 times narrower.
    assert 2.5 < widths[0] / widths[1] < 6.0


def test_keys_values_and_vocabulary_projection():
    model, site = planted_ffn()
    np.testing.assert_array_equal(site.keys, np.eye(MEMORIES, DIM))
    np.testing.assert_array_equal(value_top_tokens(site, np.eye(DIM)), VALUE_TOKENS)
    distributions = value_vocabulary_distributions(site, np.eye(DIM))
    expected = np.full(DIM, 1.0)
    expected[VALUE_TOKENS[0]] = np.e
    np.testing.assert_allclose(distributions[0], expected / expected.sum(), rtol=1e-6)


def test_transformer_block_sites_record_the_real_coefficients():
    model = build_decoder_language_model(
        30, 6, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=24
    )
    tokens = np.random.default_rng(0).integers(1, 30, size=(3, 6)).astype("int32")
    before = keras.ops.convert_to_numpy(model(tokens))
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # no deprecated `norm_first` read
        sites = transformer_block_sites(model)
    assert [s.name for s in sites] == ["block_0", "block_1"]
    coefficients = memory_coefficients(model, tokens)
    assert [c.shape for c in coefficients] == [(3, 6, 24)] * 2
    # Layer 0's FFN input is LayerNorm(x + attention(LayerNorm(x))) of the embedded tokens.
    block = model.get_layer("block_0")
    x = model.get_layer("position_embedding")(model.get_layer("token_embedding")(tokens))
    x = x + block.attention(block.attention_norm(x))
    hidden = keras.ops.convert_to_numpy(block.mlp_hidden(block.mlp_norm(x)))
    np.testing.assert_allclose(coefficients[0], hidden, rtol=1e-5, atol=1e-5)
    assert all("call" not in vars(s.hidden) for s in sites)  # the recording is undone
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(tokens)), before, atol=1e-6)


def test_bad_arguments():
    model, site = planted_ffn()
    with pytest.raises(ValueError, match="Received: top_k=0"):
        analyze_memories(model, [], np.eye(DIM), [site], top_k=0)
    with pytest.raises(ValueError, match="Received: resamples=0"):
        analyze_memories(model, [], np.eye(DIM), [site], resamples=0)
    with pytest.raises(ValueError, match="Each batch must be"):
        analyze_memories(model, [np.zeros((1, 2, DIM))], np.eye(DIM), [site])
    with pytest.raises(
        ValueError, match=r"block that `find_feed_forward_layers`.*FeedForwardSite\("
    ):
        transformer_block_sites(model)


# The token before each trigger position: the official target (see below).
TRIGGER_TOKENS = {
    0: {(3, 1): 5, (17, 4): 5},  # two of key 0's triggers have its value's token
    1: {(0, 3): 0, (7, 0): 0, (19, 2): 0},  # none of key 1's (value token 6)
    2: {(8, 1): 7, (12, 4): 1},  # one of key 2's
    3: {(15, 0): 0, (2, 2): 0, (9, 3): 0},  # all three of key 3's
}


def test_official_agreement_counts_the_triggers_whose_token_is_the_values():
    # The official code's target is `record_tokens[-2]` of a prefix that runs
    # one token past the trigger position: the token at the trigger position,
    # which is the previous position's next token.
    model, site = planted_ffn()
    x, next_tokens, valid = planted_corpus()
    for tokens in TRIGGER_TOKENS.values():
        for (example, position), token in tokens.items():
            next_tokens[example, position] = token
    analysis = analyze_memories(
        model, batches(x, next_tokens, valid), np.eye(DIM), sites=[site], top_k=3
    )
    assert analysis.trigger_tokens[0][0].tolist() == [5, -1, 5]  # (11, 0) has no token
    assert analysis.trigger_target_counts[0].tolist() == [2, 0, 1, 3]
    assert analysis.official_agreement_rate.tolist() == [0.75]
    assert analysis.agreement_rate.tolist() == [0.75]  # top-1 trigger's next token: 0, 1, 2


@pytest.mark.parametrize("nonlinear_readout", [False, True])
def test_official_zero_agreement_matches_a_loop_reference(nonlinear_readout):
    keras.utils.set_random_seed(4)
    rng = np.random.default_rng(4)
    inputs = keras.Input((None, 5))
    hidden = keras.layers.Dense(12, activation="gelu")  # negative coefficients too
    output = keras.layers.Dense(5, bias_initializer="random_normal")
    model = keras.Model(inputs, output(hidden(inputs)))
    x = rng.normal(size=(30, 4, 5)).astype("float32")
    valid = np.zeros((30, 4), bool)
    valid[np.arange(30), rng.integers(0, 4, 30)] = True  # one position: the sampled one
    valid[0] = False  # no position: not sampled
    embedding = rng.normal(size=(5, 7))
    head = (lambda h: np.tanh(h) @ embedding) if nonlinear_readout else (lambda h: h @ embedding)
    analysis = analyze_memories(
        model,
        batches(x, np.zeros((30, 4), int), valid, 8),
        embedding,
        [FeedForwardSite(hidden, output)],
        readout=head if nonlinear_readout else None,
    )
    zero = []
    for residual in x[valid]:
        m = np.maximum(keras.ops.convert_to_numpy(hidden(residual[None]))[0], 0.0)
        layer_output = residual + keras.ops.convert_to_numpy(output(hidden(residual[None])))[0]
        tops = {
            int(np.argmax(head(m[i] * site_value)))
            for i, site_value in enumerate(keras.ops.convert_to_numpy(output.kernel))
        }
        zero.append(int(np.argmax(head(layer_output))) not in tops)
    np.testing.assert_allclose(analysis.official_zero_agreement_rate, [np.mean(zero)])
    assert 0 < np.mean(zero) < 1


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("source", ["keras_attn", "keras_hub"])
def test_the_analysis_runs_on_the_library_lm_and_a_keras_hub_gpt2(source, keras_hub_backbone):
    keras.utils.set_random_seed(0)
    tokens = np.random.default_rng(0).integers(1, 30, size=(4, 7)).astype("int32")
    if source == "keras_attn":
        model = build_decoder_language_model(
            30, 7, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=24
        )
        inputs = tokens
        embedding = keras.ops.convert_to_numpy(model.get_layer("token_embedding").embeddings).T
    else:
        model = keras_hub_backbone(
            "gpt2", hidden_dim=16, intermediate_dim=24, max_sequence_length=7
        )
        inputs = {"token_ids": tokens, "padding_mask": np.ones_like(tokens)}
        embedding = keras.ops.convert_to_numpy(model.token_embedding.embeddings).T
    sites = transformer_block_sites(model)
    assert len(sites) == 2
    next_tokens = np.concatenate([tokens[:, 1:], tokens[:, :1]], axis=1)
    analysis = analyze_memories(
        model, [(inputs, next_tokens)], embedding, sites, top_k=4, permutations=5, resamples=5
    )
    coefficients = memory_coefficients(model, inputs, sites)
    for layer, site_coefficients in enumerate(coefficients):
        assert site_coefficients.shape == (4, 7, 24)
        # The top trigger of every key is its largest coefficient in the batch.
        np.testing.assert_allclose(
            analysis.trigger_scores[layer][:, 0], site_coefficients.max(axis=(0, 1)), rtol=1e-5
        )
        counts = analysis.trigger_target_counts[layer]
        tops = analysis.value_top_tokens[layer]
        expected = (analysis.trigger_tokens[layer] == tops[:, None]).sum(axis=1)
        np.testing.assert_array_equal(counts, expected)
    assert analysis.official_zero_agreement_rate.shape == (2,)
    assert np.all((0 <= analysis.official_agreement_rate) & (analysis.official_agreement_rate <= 1))


# The feed-forward layers of each KerasHub block: (path, first Dense, second Dense, residual).
KERAS_HUB_SITES = {
    "bert": [
        (
            f"transformer_layer_{i}",
            "feedforward_intermediate_dense",
            "feedforward_output_dense",
            None,
        )
        for i in range(2)
    ],
    "gpt2": [
        (
            f"transformer_layer_{i}",
            "feedforward_intermediate_dense",
            "feedforward_output_dense",
            "feedforward_layer_norm",  # pre-norm: its input is the residual stream
        )
        for i in range(2)
    ],
    "vit": [(f"vit_encoder/transformer_block_{i}", "dense_1", "dense_2", "ln_2") for i in (1, 2)],
}


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("name", sorted(KERAS_HUB_SITES))
def test_transformer_block_sites_finds_the_blocks_of_keras_hub_backbones(name, keras_hub_backbone):
    backbone = keras_hub_backbone(name)
    sites = transformer_block_sites(backbone)
    described = [
        (site.name, site.hidden.name, site.output.name, site.residual and site.residual.name)
        for site in sites
    ]
    assert described == KERAS_HUB_SITES[name]
    assert [site.keys.shape for site in sites] == [(16, 8)] * 2
    assert [site.values.shape for site in sites] == [(16, 8)] * 2
