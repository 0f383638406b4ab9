import json
import os
from types import SimpleNamespace

import numpy as np
import pytest

from keras_attn.cli import main
from keras_attn.reproduce import t2t
from tools.docs_table_specs import TABLES
from tools.docs_tables import Results


# The whole small run, like every reproduction's (`python -m pytest -m slow`);
# the notebook trains the same models at the small size in the default suite.
@pytest.mark.slow
def test_small_run_writes_consistent_results(tmp_path, small_run, final_accuracies):
    results = small_run("t2t")
    setting = results["setting"]
    interval = setting["steps"] // setting["evaluations"]
    assert results["curve_steps"] == [interval * (i + 1) for i in range(setting["evaluations"])]
    assert list(results["runs"]) == list(t2t.MODELS)
    finals = {}
    for name, runs in results["runs"].items():
        finals[name] = final_accuracies(runs, results["summary"][name], setting)
        assert results["models"][name]["parameters"] == t2t.build_model(name).count_params()
    for comparison, (model, baseline) in t2t.COMPARISONS.items():
        paired = finals[model] - finals[baseline]
        difference = results["summary"]["differences"][comparison]
        np.testing.assert_allclose(difference["per_seed"], paired)
        np.testing.assert_allclose(
            [difference["mean"], difference["std"]], [paired.mean(), paired.std(ddof=1)]
        )
    assert (tmp_path / "t2t.png").stat().st_size > 0
    # The docs table of the full result reads this format.
    (tmp_path / "t2t-full.json").write_text((tmp_path / "t2t.json").read_text())
    rows = TABLES["t2t-full"](Results(tmp_path)).splitlines()[2:]
    assert len(rows) == len(t2t.COMPARISONS) * 2


def test_tokenizer_models_share_the_backbone():
    t2t_model, patch_model = (t2t.build_model(name) for name in t2t.COMPARISONS["tokenizer"])
    # 49 tokens and the class token in both.
    for model in (t2t_model, patch_model):
        assert model.get_layer("position_embedding").output.shape == (None, 50, 64)

    def shapes(model):
        return [(w.path, w.shape) for layer in t2t.backbone_layers(model) for w in layer.weights]

    assert shapes(t2t_model) == shapes(patch_model)
    blocks = [f"block_{index}" for index in range(4)]
    names = ["class_token", "position_embedding", *blocks, "final_norm", "head"]
    assert [layer.name for layer in t2t.backbone_layers(t2t_model)] == names
    # No query/key/value bias in the backbone; the output projection keeps its bias.
    paths = [path for path, _ in shapes(t2t_model)]
    assert not [p for p in paths if p.endswith(("query/bias", "key/bias", "value/bias"))]
    assert sum(p.endswith("attention/attention_output/bias") for p in paths) == 4


def test_tokenizer_pair_starts_from_the_same_backbone_weights():
    def backbone_after_reset(name, seed):
        model = t2t.compile_model(name, steps=4, mode="eager")
        t2t.reset(model, name, seed)
        return [np.array(w) for layer in t2t.backbone_layers(model) for w in layer.weights]

    first, second = (backbone_after_reset(name, 1) for name in t2t.COMPARISONS["tokenizer"])
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    other_seed = backbone_after_reset("t2t", 2)
    assert not all(np.array_equal(a, b) for a, b in zip(first, other_seed, strict=True))


def test_deep_narrow_and_shallow_wide_have_equal_parameters():
    deep, wide = (t2t.build_model(name) for name in t2t.COMPARISONS["shape"])
    assert (deep.count_params(), wide.count_params()) == (301_932, 300_524)
    assert abs(deep.count_params() / wide.count_params() - 1) < 0.01

    def blocks(model):
        return [layer for layer in model.layers if layer.name.startswith("block_")]

    assert (len(blocks(deep)), len(blocks(wide))) == (15, 2)
    sizes = [t2t.MODELS[name] for name in t2t.COMPARISONS["shape"]]
    assert [s["hidden_dim"] // s["num_heads"] for s in sizes] == [16, 16]


def test_full_setting_trains_long_enough():
    full = t2t.SETTINGS["full"]
    assert full["steps"] >= 600 and full["seeds"] >= 2 and full["test_size"] == 10_000


def test_setting_overrides():
    args = SimpleNamespace(full=True, seeds=5, steps=None, train_size=300)
    chosen = t2t.setting(args)
    expected = "small" if os.environ.get("KERAS_ATTN_SMALL") else "full"
    assert chosen["name"] == expected and chosen["seeds"] == 5 and chosen["train_size"] == 300
    assert chosen["steps"] == t2t.SETTINGS[expected]["steps"]
    with pytest.raises(ValueError, match="Received: steps=7"):
        t2t.setting(SimpleNamespace(full=False, seeds=None, steps=7, train_size=None))


def test_the_paired_differences_are_taken_per_seed():
    finals = {"t2t": (0.7, 0.8), "patches": (0.6, 0.8), "deep_narrow": (0.5,)}
    runs = {name: [{"final_test_accuracy": a} for a in values] for name, values in finals.items()}
    summary = t2t.summarize(runs)
    difference = summary["differences"]["tokenizer"]
    np.testing.assert_allclose(difference["per_seed"], [0.1, 0.0])
    np.testing.assert_allclose(difference["std"], np.std([0.1, 0.0], ddof=1))
    np.testing.assert_allclose(summary["patches"]["std"], np.std([0.6, 0.8], ddof=1))
    assert list(summary["differences"]) == ["tokenizer"]  # shallow_wide did not run


@pytest.mark.slow
def test_fast_setting_trains_every_model(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_ATTN_SMALL", "0")
    assert main(["reproduce", "t2t", "--out", str(tmp_path)]) == 0
    summary = json.loads((tmp_path / "t2t.json").read_text())["summary"]
    assert all(summary[name]["mean"] > 0.3 for name in t2t.MODELS)  # chance is 0.1
