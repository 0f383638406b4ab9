import json

import pytest

from keras_attn.cli import main


@pytest.mark.slow
def test_parity_reproduction_writes_accuracies_for_both_scalings(tmp_path):
    assert main(["reproduce", "parity", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "parity.json").read_text())
    scales = {row["logit_scale"] for row in results["summary"]}
    assert scales == {"none", "log_length"}
    for row in results["summary"]:
        assert 0.0 <= row["median_test_accuracy"] <= 1.0
        assert row["seeds"] == results["setting"]["first_seeds"]
    assert (
        len(results["runs"])
        == 2 * len(results["setting"]["first_train_lengths"]) * (results["setting"]["first_seeds"])
    )
    assert (tmp_path / "parity.png").stat().st_size > 0
