"""The head pruning benchmark times a KerasHub BERT, converted and pruned, at a tiny size."""

import json

import keras
import pytest


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_keras_hub_bert_rows_time_the_converted_and_the_pruned_backbone(load_benchmark, tmp_path):
    benchmark = load_benchmark("head_pruning")
    sizes = {"num_layers": 2, "num_heads": 4, "hidden_dim": 8, "intermediate_dim": 16}
    variants = benchmark.pruned_variants(benchmark.keras_hub_bert(**sizes), [0.5], convert=True)
    rows = benchmark.measure(variants, length=6, repeats=1, vocabulary_size=30)
    assert [(row["model"], row["heads"]) for row in rows] == [
        ("unpruned", 8),
        ("converted, unpruned", 8),
        ("50% pruned", 4),
    ]
    # Four heads of width 2 go: query, key and value kernels (8, 2) and biases, output rows (2, 8).
    assert rows[0]["parameters"] == rows[1]["parameters"] == rows[2]["parameters"] + 4 * 70
    for row in rows:
        for batch in (1, 64):
            assert row[f"batch_{batch}_per_s"] > 0
            ratio = row[f"batch_{batch}_per_s"] / rows[0][f"batch_{batch}_per_s"]
            assert row[f"batch_{batch}_ratio"] == pytest.approx(ratio)


@pytest.mark.slow  # BERT-base: a minute of building and timing
@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_keras_hub_bert_run_writes_its_rows(load_benchmark, tmp_path):
    benchmark = load_benchmark("head_pruning")
    argv = ["--model", "keras-hub-bert", "--length", "8", "--repeats", "1", "--out", str(tmp_path)]
    benchmark.main(argv)
    data = json.loads((tmp_path / "head_pruning_keras_hub_bert.json").read_text())
    assert data["meta"]["setting"] == "benchmark"
    assert [row["heads"] for row in data["results"]["rows"]] == [144, 144, 72]
