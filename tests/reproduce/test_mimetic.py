import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from keras_attn.cli import main
from keras_attn.pretrained import load_minilm_weights
from keras_attn.reproduce import mimetic


# The whole small run, like every reproduction's (`python -m pytest -m slow`);
# the notebook trains the same models at the small size in the default suite.
@pytest.mark.slow
def test_small_run_writes_consistent_results(tmp_path, small_run, final_accuracies):
    results = small_run("mimetic")
    setting = results["setting"]
    (experiment,) = results["experiments"]
    (regime,) = setting["regimes"]
    assert experiment["train_size"] == regime["train_size"]
    interval = regime["steps"] // setting["evaluations"]
    assert experiment["curve_steps"] == [interval * (i + 1) for i in range(setting["evaluations"])]
    finals = {
        init: final_accuracies(experiment["runs"][init], experiment["summary"][init], setting)
        for init in mimetic.INITS
    }
    paired = finals["mimetic"] - finals["default"]
    difference = experiment["summary"]["difference"]
    np.testing.assert_allclose(difference["per_seed"], paired)
    np.testing.assert_allclose(
        [difference["mean"], difference["std"]], [paired.mean(), paired.std(ddof=1)]
    )
    minilm = json.loads((tmp_path / "mimetic_minilm.json").read_text())
    assert np.shape(minilm["query_key_per_head"]["diagonal_score"]) == (6, 12)
    assert np.shape(minilm["value_output_per_layer"]["diagonal_score"]) == (6,)
    assert (tmp_path / "mimetic.png").stat().st_size > 0
    assert (tmp_path / "mimetic_minilm.png").stat().st_size > 0


def test_minilm_statistics_match_the_checkpoint_tensors():
    analysis = mimetic.analyze_minilm()
    tensors = load_minilm_weights().tensors
    layer, head, head_dim = 2, 5, 32
    rows = slice(head * head_dim, (head + 1) * head_dim)
    prefix = f"encoder.layer.{layer}.attention"
    query = tensors[f"{prefix}.self.query.weight"][rows].astype(np.float64)  # (32, 384)
    key = tensors[f"{prefix}.self.key.weight"][rows].astype(np.float64)
    product = query.T @ key  # (384, 384): x_i^T W_q^T W_k x_j in PyTorch layout
    off_diagonal = product[~np.eye(384, dtype=bool)]
    expected = np.trace(product) / 384 / off_diagonal.std()
    np.testing.assert_allclose(
        analysis["query_key_per_head"]["diagonal_score"][layer][head], expected, rtol=1e-5
    )
    value = tensors[f"{prefix}.self.value.weight"].astype(np.float64)  # (384, 384)
    output = tensors[f"{prefix}.output.dense.weight"].astype(np.float64)  # (384, 384)
    product = value.T @ output.T  # x W_v W_o in the Keras orientation
    np.testing.assert_allclose(
        analysis["value_output_per_layer"]["mean_diagonal"][layer],
        np.trace(product) / 384,
        rtol=1e-5,
    )


def test_the_two_inits_differ_only_in_attention_kernels_and_biases():
    chosen = dict(mimetic.SETTINGS["small"])
    model = mimetic.compile_model(chosen, "learned", steps=4)
    mimetic.reset(model, chosen, "learned", 1, "default")
    default = {w.path: np.array(w) for w in model.weights}
    mimetic.reset(model, chosen, "learned", 1, "mimetic")
    changed = {w.path for w in model.weights if not np.array_equal(default[w.path], w)}
    assert changed == {
        f"block_{i}/attention/{name}/kernel"
        for i in range(chosen["num_layers"])
        for name in ("query", "key", "value", "attention_output")
    }
    mimetic.reset(model, chosen, "learned", 1, "default")
    assert all(np.array_equal(default[w.path], w) for w in model.weights)


def test_setting_overrides():
    args = SimpleNamespace(
        full=True, seeds=5, steps=None, train_sizes=[300], position_embeddings=None
    )
    chosen = mimetic.setting(args)
    expected = "small" if os.environ.get("KERAS_ATTN_SMALL") else "full"
    assert chosen["name"] == expected and chosen["seeds"] == 5
    steps = mimetic.SETTINGS[expected]["regimes"][0]["steps"]
    assert chosen["regimes"] == ({"train_size": 300, "steps": steps},)
    assert chosen["position_embeddings"] == mimetic.SETTINGS[expected]["position_embeddings"]


def test_steps_must_divide_into_the_evaluations():
    args = SimpleNamespace(
        full=False, seeds=None, steps=7, train_sizes=None, position_embeddings=None
    )
    with pytest.raises(ValueError, match="Received: steps=7"):
        mimetic.setting(args)


def test_the_paired_difference_is_taken_per_seed():
    runs = {
        "default": [{"final_test_accuracy": 0.6}, {"final_test_accuracy": 0.8}],
        "mimetic": [{"final_test_accuracy": 0.7}, {"final_test_accuracy": 0.8}],
    }
    summary = mimetic.summarize(runs)
    np.testing.assert_allclose(summary["difference"]["per_seed"], [0.1, 0.0])
    np.testing.assert_allclose(summary["difference"]["std"], np.std([0.1, 0.0], ddof=1))
    np.testing.assert_allclose(summary["default"]["std"], np.std([0.6, 0.8], ddof=1))


@pytest.mark.slow
def test_fast_setting_trains_both_inits(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_ATTN_SMALL", "0")
    main(["reproduce", "mimetic", "--out", str(tmp_path)])
    experiments = json.loads((tmp_path / "mimetic.json").read_text())["experiments"]
    for experiment in experiments:
        summary = experiment["summary"]
        assert summary["default"]["mean"] > 0.5 and summary["mimetic"]["mean"] > 0.5
