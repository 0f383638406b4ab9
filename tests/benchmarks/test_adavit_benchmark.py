"""The AdaViT benchmark's smoke run writes every case, and its docs table reads the file."""

import json

import keras
import numpy as np
import pytest

from tools.docs_table_specs import TABLES
from tools.docs_tables import Results


# A tiny model, but still two trainings and eight XLA compilations per token count.
@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_small_run_writes_every_case_and_the_docs_table(tmp_path, load_benchmark):
    benchmark = load_benchmark("adavit")
    output = tmp_path / "results" / "benchmarks" / "adavit.json"
    benchmark.main(["--small", "--keep-rates", "0.5", "--output", str(output)])
    data = json.loads(output.read_text())
    assert data["meta"]["setting"] == "benchmark"
    cases = data["results"]["cases"]
    policies = ["learned γ=0.5", "imposed keep 0.5"]
    expected = [(49, 1), (49, 64), (196, 1), (196, 64)]
    assert [(c["patches"], c["batch"], c["policy"]) for c in cases] == [
        (patches, batch, policy) for patches, batch in expected for policy in policies
    ]
    for case in cases:
        assert case["full_macs"] > case["fast_macs"] > 0
        np.testing.assert_allclose(case["mac_ratio"], case["full_macs"] / case["fast_macs"])
        np.testing.assert_allclose(case["speedup"], case["full_ms"] / case["fast_ms"])
        np.testing.assert_allclose(case["ceiling_speedup"], case["full_ms"] / case["ungated_ms"])
        assert 0 < case["gated_mac_share"] < 1
        change = 100 * (case["fast_accuracy"] - case["full_accuracy"])
        np.testing.assert_allclose(case["accuracy_change_points"], change)
        assert set(case["usage"]) == {"patches", "heads", "attention", "mlp", "tokens"}
        if case["keep_rate"] is not None:  # 24 or 25 of 49 patches, 98 of 196
            assert case["usage"]["patches"] == pytest.approx(0.5, abs=0.01)
            assert case["keep_rate"] == 0.5 and case["usage"]["heads"] == 0.5
    # The same model and decisions at both batch sizes: the same accuracy and MACs.
    for first, second in zip(cases[:2], cases[2:4], strict=True):
        assert (first["fast_accuracy"], first["fast_macs"]) == (
            second["fast_accuracy"],
            second["fast_macs"],
        )
    rows = TABLES["adavit-benchmark"](Results(tmp_path / "results")).splitlines()[2:]
    assert len(rows) == len(cases) and rows[0].startswith("| 49 | 1 | learned γ=0.5 |")


@pytest.mark.parametrize("content", ["", '{"results": {"cas', '{"results": []}'])
def test_a_damaged_output_is_set_aside_and_measured_again(tmp_path, load_benchmark, content):
    output = tmp_path / "paper.json"
    output.write_text(content)
    with pytest.warns(UserWarning, match=r"paper\.json cannot be read.*paper\.json\.damaged"):
        assert load_benchmark("adavit")._done_cases(output) == (set(), [])
    assert (tmp_path / "paper.json.damaged").read_text() == content
    assert not output.exists()


def test_bounds_by_hand(load_benchmark):
    # 10 of 110 MACs are fixed; the policy keeps 50 of the 100 gated ones.
    case = {"full_macs": 110, "fast_macs": 60, "full_ms": 10.0}
    load_benchmark("adavit")._add_bounds(case, ungated_ms=4.0, fixed_macs=10)
    assert case["gated_mac_share"] == 0.5
    assert case["ceiling_speedup"] == 2.5  # 10 ms / 4 ms
    assert case["ideal_speedup"] == pytest.approx(10 / (4 + 0.5 * 6))


def test_docs_table_is_pending_without_the_file(tmp_path):
    text = TABLES["adavit-benchmark"](Results(tmp_path))
    assert text.startswith("**Pending.**") and "python benchmarks/adavit.py" in text


def test_paper_scale_decisions_cut_the_macs_as_asked(load_benchmark):
    benchmark = load_benchmark("adavit")
    keras.utils.set_random_seed(0)
    vit = benchmark.build_vision_transformer(
        (16, 16), 3, patch_size=4, hidden_dim=8, num_layers=3, num_heads=2
    )
    adavit = benchmark.AdaViT(vit)
    adavit(np.zeros((1, 16, 16), "float32"))
    fast = adavit.fast_path()
    rate = benchmark.keep_rate_for_mac_ratio(adavit, fast, 2.0, 64, seed=0)
    imposed = adavit.random_decisions(64, rate, seed=0)
    assert fast.full_macs() / fast.macs(imposed).mean() == pytest.approx(2.0, rel=0.02)
    drawn = benchmark.independent_decisions(adavit, 2000, rate, seed=0)
    assert {k: v.shape[1:] for k, v in drawn.items()} == {
        k: v.shape[1:] for k, v in imposed.items()
    }
    usage = adavit.usage(drawn)
    for key in benchmark.DECISION_KEYS:  # the same usage, example counts that differ
        assert usage[key] == pytest.approx(rate, abs=0.02), key
    assert len(np.unique(drawn["patches"].sum(-1))) > 2


# Two tiny backbones, each compiled for batch 1 and 64: a minute or more.
@pytest.mark.slow
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_paper_scale_smoke_run_writes_each_case_and_resumes(tmp_path, load_benchmark):
    benchmark = load_benchmark("adavit")
    output = tmp_path / "paper.json"
    benchmark.main(["--paper-scale", "--small", "--output", str(output)])
    results = json.loads(output.read_text())["results"]
    assert results["settings"]["partial"] is False  # every case measured
    cases = results["cases"]
    assert [(c["backbone"], c["batch"], c["policy"]) for c in cases] == [
        (name, batch, policy)
        for name in ("deit_s", "t2t_vit_19")
        for batch in (1, 64)
        for policy in ("imposed", "random")
    ]
    for case in cases:
        np.testing.assert_allclose(case["speedup"], case["full_ms"] / case["fast_ms"])
        assert case["mac_ratio"] > 1 and case["ideal_speedup"] > 0
        if case["batch"] == 1:  # the computed MACs are at least the kept ones
            assert case["computed_macs"] >= case["fast_macs"]
            assert case["computed_ideal_speedup"] <= case["ideal_speedup"]
            ratio = case["speedup"] / case["computed_ideal_speedup"]
            np.testing.assert_allclose(case["of_computed_ideal"], ratio)
        else:
            assert "computed_macs" not in case
    benchmark.main(["--paper-scale", "--small", "--resume", "--output", str(output)])
    assert json.loads(output.read_text())["results"]["cases"] == cases  # nothing measured again


# Eager on torch: no compilation, but half a minute of rounds at batch 64.
@pytest.mark.slow
@pytest.mark.backend_agnostic
@pytest.mark.skipif(keras.backend.backend() != "torch", reason="torch's eager fast path")
def test_paper_scale_smoke_run_on_torch(tmp_path, load_benchmark):
    output = tmp_path / "paper.json"
    load_benchmark("adavit").main(["--paper-scale", "--small", "--output", str(output)])
    results = json.loads(output.read_text())["results"]
    assert results["settings"]["backend"] == "torch" and results["settings"]["partial"] is False
    assert len(results["cases"]) == 8  # two backbones, two batch sizes, two policies
    for case in results["cases"]:
        assert case["speedup"] > 0 and case["mac_ratio"] > 1
