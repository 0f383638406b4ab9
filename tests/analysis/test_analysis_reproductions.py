"""The `ffn-memories` and `topics` reproductions: helpers, and the small runs (slow)."""

import argparse
import json

import numpy as np
import pytest

from keras_attn.reproduce import available, ffn_memories, topics
from tools.docs_table_specs import TABLES
from tools.docs_tables import Results


def test_registered():
    assert available()["ffn-memories"] is ffn_memories
    assert available()["topics"] is topics


def test_take_off_is_the_first_step_at_half_the_final_value():
    history = [{"step": s, "x": v} for s, v in [(0, 0.0), (2, 1.0), (4, 2.5), (8, 4.0)]]
    assert topics._take_off(history, lambda r: r["x"]) == 4


def test_sentences_become_shifted_padded_ids():
    sentences = [["the", "cat", "sat"], ["a", "the", "dog", "ran", "far"]]
    vocabulary = ffn_memories._vocabulary(sentences, 4)
    assert vocabulary == ["the", "cat"]
    inputs, next_tokens = ffn_memories._encode(sentences, vocabulary, 3)
    assert inputs.tolist() == [[2, 3, 1], [1, 2, 1]]
    assert next_tokens.tolist() == [[3, 1, 0], [2, 1, 1]]


@pytest.mark.slow
def test_small_topics_run(tmp_path):
    args = argparse.Namespace(out=str(tmp_path), full=False, seed=0, seeds=None, skip_minilm=False)
    outcome = topics.run(args)
    assert outcome["setting"] == "small"
    paths = outcome["paths"]
    results = json.loads(paths["json"].read_text())
    assert results == {**outcome["results"], "meta": results["meta"]}
    synthetic = results["synthetic"]
    assert synthetic["seeds"] == [0, 1]
    for configuration in ("joint", "official"):
        summary = synthetic[configuration]
        # 400 documents in batches of 40 for 2 epochs: 20 steps, recorded at every step.
        assert summary["steps"] == list(range(21))
        curve = summary["curves"]["value_block_gap"]
        per_seed = np.array(curve["per_seed"])
        assert per_seed.shape == (2, 21)
        np.testing.assert_allclose(curve["mean"], per_seed.mean(0), atol=1e-5)
        np.testing.assert_allclose(curve["std"], per_seed.std(0, ddof=1), atol=1e-5)
    official = synthetic["official"]["curves"]
    # Frozen uniform attention: every key word gets 1/n at every step.
    np.testing.assert_allclose(official["attention_same_over_uniform"]["per_seed"], 1.0, rtol=1e-4)
    assert all(synthetic["joint"]["end_state_holds"])
    assert len(results["minilm"]["attention_per_layer"]) == 6
    assert paths["png"].exists()
    # The docs tables of the full result read this format.
    (tmp_path / "topics-full.json").write_text(paths["json"].read_text())
    end_state = TABLES["topics-full-end-state"](Results(tmp_path)).splitlines()
    assert [row.split(" | ")[0] for row in end_state[2:]] == [
        "| joint (all trained)",
        "| official (frozen)",
    ]
    take_off = TABLES["topics-full-take-off"](Results(tmp_path)).splitlines()
    assert len(take_off) == 2 + 3 + 1  # three joint statistics, the official value gap
    assert len(TABLES["topics-full-minilm"](Results(tmp_path)).splitlines()) == 2 + 6


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
