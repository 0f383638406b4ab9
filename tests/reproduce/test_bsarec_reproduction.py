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
    bsarec.run(args)
    results = json.loads((tmp_path / "bsarec.json").read_text())
    assert (tmp_path / "bsarec.png").is_file()
    assert results["setting"] == "fast"
    for model in bsarec.MODELS:
        assert sorted(results["summary"][model]) == sorted(bsarec.METRICS)
        for metric in bsarec.METRICS:
            assert 0.0 < results["summary"][model][metric]["mean"] < 1.0
        assert len(results["runs"][model]) == 1
