import argparse
import json

import numpy as np
import pytest

from keras_attn.reproduce import adavit, available
from tools.docs_table_specs import TABLES
from tools.docs_tables import Results


@pytest.mark.slow
@pytest.mark.backend_agnostic  # `python -m pytest -m slow` runs it on one backend
def test_reproduction_writes_consistent_results(tmp_path):
    assert available()["adavit"] is adavit
    args = argparse.Namespace(
        out=str(tmp_path),
        full=False,
        gammas=[0.3, 0.7],
        seeds=None,
        former_behaviour=["gate_first_block"],
    )
    outcome = adavit.run(args)
    assert outcome["setting"] == "small"
    paths = outcome["paths"]
    results = json.loads(paths["json"].read_text())
    assert paths["png"].stat().st_size > 0
    seeds = adavit.SETTINGS["small"]["seeds"]
    assert results["setting"]["seeds"] == seeds >= 2
    assert results["adavit_options"] == {"gate_first_block": False}
    runs = results["runs"]
    assert [run["seed"] for run in runs] == list(range(seeds))
    for run in runs:
        full = run["full"]
        assert 0.0 <= full["accuracy"] <= 1.0 and full["latency_ms"] > 0
        assert [entry["gamma"] for entry in run["adavit"]] == [0.3, 0.7]
        for entry in run["adavit"]:
            learned, random = entry["learned"], entry["random"]
            assert 0 < learned["macs"] <= full["macs"] * 1.01  # gates cost a little
            # The same usage per kind in expectation: roughly the same MACs.
            assert random["macs"] == pytest.approx(learned["macs"], rel=0.25)
            assert random["usage"]["patches"] == pytest.approx(
                learned["usage"]["patches"], abs=0.05
            )
            assert all(policy["latency_ms"] > 0 for policy in (learned, random))
    summary = results["summary"]
    accuracies = [run["full"]["accuracy"] for run in runs]
    np.testing.assert_allclose(summary["full"]["accuracy"]["mean"], np.mean(accuracies))
    np.testing.assert_allclose(summary["full"]["accuracy"]["std"], np.std(accuracies, ddof=1))
    latencies = [run["adavit"][1]["random"]["latency_ms"] for run in runs]
    np.testing.assert_allclose(
        summary["adavit"][1]["random"]["latency_ms"]["mean"], np.mean(latencies)
    )
    # The docs table of the full result reads this format: the full ViT and two rows per γ.
    (tmp_path / "adavit-full.json").write_text(paths["json"].read_text())
    rows = TABLES["adavit-full"](Results(tmp_path)).splitlines()[2:]
    assert len(rows) == 1 + 2 * 2 and rows[1].startswith("| AdaViT γ=0.3, learned policy |")
    # The ablation's table reads one such file per option.
    (tmp_path / "adavit-ablation").mkdir()
    (tmp_path / "adavit-ablation" / "none.json").write_text(paths["json"].read_text())
    rows = TABLES["adavit-ablation"](Results(tmp_path)).splitlines()
    assert rows[0].startswith("| AdaViT options | full ViT | γ=0.3 learned (usage) |")
    assert len(rows) == 3 and rows[2].startswith("| official defaults |")


def test_full_setting_matches_the_documented_protocol():
    full = adavit.SETTINGS["full"]
    assert full["seeds"] == 3 and full["test"] >= 5000


def test_docs_table_is_pending_without_the_file(tmp_path):
    text = TABLES["adavit-full"](Results(tmp_path))
    assert text.startswith("**Pending.**") and "reproduce adavit --full" in text
