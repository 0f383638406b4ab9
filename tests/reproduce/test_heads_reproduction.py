import argparse
import json

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
    outcome = module.run(args)
    assert outcome["setting"] == "small"
    results = json.loads(outcome["paths"]["json"].read_text())
    assert (tmp_path / "heads.png").stat().st_size > 0
    accuracy = results["accuracy"]
    assert set(accuracy) == {"importance", "reverse", "random_0"}
    # Nothing is pruned at 0%, so every ordering starts from the same model.
    assert len({curve[0] for curve in accuracy.values()}) == 1
    assert all(len(curve) == len(results["fractions"]) for curve in accuracy.values())
    assert list(results["single_head_ablation_accuracy"]) == ["layer_5/attention"]
    assert len(results["single_head_ablation_accuracy"]["layer_5/attention"]) == 12
    parameters = [row["parameters"] for row in results["throughput"]]
    # Half of the 72 heads go: 36 x (3 x (384 x 32 + 32) + 32 x 384) parameters.
    assert parameters[0] - parameters[1] == 36 * (3 * (384 * 32 + 32) + 32 * 384)
    assert results["throughput"][0]["ratio_batch_64"] == 1.0
