import argparse
import json

import numpy as np
import pytest

from keras_attn.models import build_sasrec
from keras_attn.recommendation import leave_one_out_split
from keras_attn.reproduce import available, bsarec


def test_reproduction_is_registered():
    assert available()["bsarec"] is bsarec


@pytest.mark.slow
def test_fast_reproduction_writes_six_metrics_per_model(tmp_path):
    parser = argparse.ArgumentParser()
    bsarec.add_arguments(parser)
    args = parser.parse_args(["--seeds", "1", "--epochs", "1"])
    args.out, args.full = str(tmp_path), False
    outcome = bsarec.run(args)
    results = json.loads(outcome["paths"]["json"].read_text())
    assert outcome["paths"]["png"].is_file()
    # KERAS_ATTN_SMALL runs the fast sizes (bsarec has no small entry), named small.
    assert outcome["setting"] == results["setting"] == "small"
    assert results["meta"]["setting"] == "fast"  # the small size is recorded as fast
    assert results["users"] == bsarec.SETTINGS["fast"]["users"]
    for model in bsarec.MODELS:
        assert sorted(results["summary"][model]) == sorted(bsarec.METRICS)
        for metric in bsarec.METRICS:
            assert 0.0 < results["summary"][model][metric]["mean"] < 1.0
        assert len(results["runs"][model]) == 1


def test_a_diverged_training_is_an_error_not_a_perfect_score():
    sequences = [np.array([1, 2, 3, 4, 5]), np.array([2, 4, 1, 3, 5]), np.array([5, 3, 1, 2])]
    split = leave_one_out_split(sequences, max_length=4)
    model = build_sasrec(5, max_length=4, hidden_dim=8, num_layers=1, seed=0)
    with pytest.warns(UserWarning, match="non-finite"):
        with pytest.raises(ValueError, match=r"diverged.*Received: learning_rate=1e\+30"):
            bsarec.train_and_test(model, split, 2, 1, learning_rate=1e30, batch_size=16)
