"""The `ffn-memories` reproduction: its data helpers, and the small run (slow)."""

import argparse
import json

import numpy as np
import pytest

from keras_attn.reproduce import available, ffn_memories


def test_registered():
    assert available()["ffn-memories"] is ffn_memories


def test_sentences_become_shifted_padded_ids():
    sentences = [["the", "cat", "sat"], ["a", "the", "dog", "ran", "far"]]
    vocabulary = ffn_memories._vocabulary(sentences, 4)
    assert vocabulary == ["the", "cat"]
    inputs, next_tokens = ffn_memories._encode(sentences, vocabulary, 3)
    assert inputs.tolist() == [[2, 3, 1], [1, 2, 1]]
    assert next_tokens.tolist() == [[3, 1, 0], [2, 1, 1]]


@pytest.mark.slow
def test_small_ffn_memories_run(tmp_path):
    args = argparse.Namespace(out=str(tmp_path), full=False, seed=0, top_k=5, epochs=None)
    outcome = ffn_memories.run(args)
    results = json.loads(outcome["paths"]["json"].read_text())
    assert outcome["setting"] == results["setting"] == "small"
    assert results["meta"]["setting"] == "fast"  # the small size is recorded as fast
    shares = np.array([results["residual_kept"], results["ffn_override"], results["compromise"]])
    np.testing.assert_allclose(shares.sum(axis=0), 1.0)
    assert all(0 < a < 1 for a in results["active_fraction"])
    assert results["examples"][0]["triggers"]
    for name in (
        "zero_agreement_rate",
        "agreement_rate",
        "next_token_rank",
        "official_agreement_rate",
        "official_zero_agreement_rate",
    ):
        low, high = np.array(results["intervals"][name]).T
        assert np.all(low <= np.array(results[name]) + 1e-12)
        assert np.all(np.array(results[name]) <= high + 1e-12)
