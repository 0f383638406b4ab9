import argparse
import json

import keras
import numpy as np
import pytest

from keras_attn.pretrained import load_minilm_weights
from keras_attn.reproduce import available, topics
from tools.docs_table_specs import TABLES
from tools.docs_tables import Results


def test_registered():
    assert available()["topics"] is topics


@pytest.mark.slow
@pytest.mark.backend_agnostic
def test_minilm_attention_statistics_run_on_torch():
    """The attention scores are read with `convert_to_numpy`: torch tensors that need grad."""
    if keras.backend.backend() != "torch":
        pytest.skip("The small topics run covers TensorFlow.")
    experiment = topics.minilm_experiment(num_topics=2, words_per_topic=5, num_passages=2, seed=0)
    per_layer = experiment["attention_per_layer"]
    assert len(per_layer) == load_minilm_weights().num_layers
    for statistics in per_layer:
        assert sorted(statistics) == ["different_topic", "same_topic", "uniform"]
        assert all(0.0 < value < 1.0 for value in statistics.values())


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
