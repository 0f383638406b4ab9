import argparse
import json

import numpy as np
import pytest

from keras_attn.reproduce import available
from tools.docs_table_specs import TABLES
from tools.docs_tables import Results


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
    orders = {"importance", "reverse", "random_0", "random_1", "random_2", "random_mean"}
    assert set(accuracy) == set(results["accuracy_interval"]) == orders
    # Nothing is pruned at 0%, so every ordering starts from the same model.
    assert len({curve[0] for curve in accuracy.values()}) == 1
    assert all(len(curve) == len(results["fractions"]) for curve in accuracy.values())
    for name, curve in accuracy.items():
        for value, (low, high) in zip(curve, results["accuracy_interval"][name], strict=True):
            assert low <= value <= high
    random = np.array([accuracy[f"random_{order}"] for order in range(3)])
    np.testing.assert_allclose(accuracy["random_mean"], random.mean(0))
    difference = results["importance_minus_random"]["accuracy"]
    np.testing.assert_allclose(
        difference, np.array(accuracy["importance"]) - accuracy["random_mean"], atol=1e-12
    )
    assert difference[0] == 0.0 and results["importance_minus_random"]["interval"][0] == [0, 0]
    assert list(results["single_head_ablation_accuracy"]) == ["layer_5/attention"]
    assert len(results["single_head_ablation_accuracy"]["layer_5/attention"]) == 12
    rows = results["throughput"]["rows"]
    parameters = [row["parameters"] for row in rows]
    # Half of the 72 heads go: 36 x (3 x (384 x 32 + 32) + 32 x 384) parameters.
    assert parameters[0] - parameters[1] == 36 * (3 * (384 * 32 + 32) + 32 * 384)
    assert rows[0]["ratio_batch_64"] == 1.0
    assert len(results["throughput"]["load_average_before"]) == 3
    # The docs tables of the full result read this format.
    (tmp_path / "heads-full.json").write_text(outcome["paths"]["json"].read_text())
    curves = TABLES["heads-full-curves"](Results(tmp_path)).splitlines()
    assert len(curves) == 2 + len(results["fractions"])
    assert curves[0].count("|") == 6  # pruned %, 3 orders, importance − random
    throughput = TABLES["heads-full-throughput"](Results(tmp_path)).splitlines()
    assert throughput[2].startswith("| 0% | 22,568,071 |")
