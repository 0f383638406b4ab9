import argparse
import json

import pytest

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
