import argparse
import json

import numpy as np
import pytest

from keras_attn.reproduce import available


@pytest.mark.slow
def test_small_heads_reproduction(tmp_path, monkeypatch):
    monkeypatch.setenv("KERAS_ATTN_SMALL", "1")
    module = available()["heads"]
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    args = parser.parse_args([])
    args.out, args.full = tmp_path, False
    module.run(args)
    results = json.loads((tmp_path / "heads.json").read_text())
    assert (tmp_path / "heads.png").stat().st_size > 0
    accuracy = results["accuracy"]
    assert set(accuracy) == {"importance", "reverse", "random_0"}
    # Nothing is pruned at 0%, so every ordering starts from the same model.
    assert len({curve[0] for curve in accuracy.values()}) == 1
    assert all(len(curve) == len(results["fractions"]) for curve in accuracy.values())
    assert list(results["single_head_ablation_accuracy"]) == ["layer_5_attention"]
    assert len(results["single_head_ablation_accuracy"]["layer_5_attention"]) == 12
    parameters = [row["parameters"] for row in results["throughput"]]
    # Half of the 72 heads go: 36 x (3 x (384 x 32 + 32) + 32 x 384) parameters.
    assert parameters[0] - parameters[1] == 36 * (3 * (384 * 32 + 32) + 32 * 384)
    assert results["throughput"][0]["ratio_batch_64"] == 1.0


def test_scores_of_pruned_model_map_back_to_original_heads():
    from keras_attn.pruning import select_heads
    from keras_attn.reproduce.heads import _scores_of_kept_heads

    pruned_scores = {"layer_0_attention": np.array([0.5, 0.2]), "layer_1_attention": np.ones(3)}
    scores = _scores_of_kept_heads(pruned_scores, {"layer_0_attention": [0]}, num_heads=3)
    np.testing.assert_array_equal(scores["layer_0_attention"], [-np.inf, 0.5, 0.2])
    np.testing.assert_array_equal(scores["layer_1_attention"], [1.0, 1.0, 1.0])
    # The removed head stays removed, the next lowest joins it.
    assert select_heads(scores, 2) == {"layer_0_attention": [0, 2]}
