import argparse
import json

import pytest

from keras_attn.reproduce import adavit, available


@pytest.mark.slow
def test_reproduction_writes_consistent_results(tmp_path):
    assert available()["adavit"] is adavit
    args = argparse.Namespace(out=str(tmp_path), full=False, gammas=[0.3, 0.7], seed=0)
    outcome = adavit.run(args)
    assert outcome["setting"] == "small"
    paths = outcome["paths"]
    results = json.loads(paths["json"].read_text())
    assert paths["png"].stat().st_size > 0
    full = results["full_model"]
    assert 0.0 <= full["accuracy"] <= 1.0
    assert [run["gamma"] for run in results["adavit"]] == [0.3, 0.7]
    for run in results["adavit"]:
        assert 0 < run["macs"] <= full["macs"] * 1.01  # gates cost a little
        # Same keep rate per kind, but independent decisions: roughly the same MACs.
        assert run["random_policy"]["macs"] == pytest.approx(run["macs"], rel=0.25)
        assert set(run["usage"]) == {"patches", "heads", "attention", "mlp"}
    for times in results["latency_ms"].values():
        assert set(times) == {
            "full (XLA)",
            "AdaViT γ=0.3 fast path",
            "AdaViT γ=0.7 fast path",
        }
        assert all(ms > 0 for ms in times.values())
