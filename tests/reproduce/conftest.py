import json

import numpy as np
import pytest

from keras_attn.cli import main


@pytest.fixture
def small_run(tmp_path):
    """`run(name)`: the reproduction's whole small run into `tmp_path`, and its results file.

    The small setting trains at least two seeds, so that each summary has a spread.
    """

    def run(name):
        assert main(["reproduce", name, "--out", str(tmp_path)]) == 0
        results = json.loads((tmp_path / f"{name}.json").read_text())
        assert results["setting"]["name"] == "small" and results["setting"]["seeds"] >= 2
        return results

    return run


@pytest.fixture
def final_accuracies():
    """`finals(runs, summary, setting)`: the final test accuracy of each seed's run.

    Checks that there is a run per seed, each with an accuracy per evaluation,
    and that `summary` holds the mean and sample standard deviation of the
    final accuracies.
    """

    def finals(runs, summary, setting):
        assert [run["seed"] for run in runs] == list(range(setting["seeds"]))
        assert all(len(run["test_accuracy"]) == setting["evaluations"] for run in runs)
        accuracies = np.array([run["final_test_accuracy"] for run in runs])
        np.testing.assert_allclose(summary["mean"], accuracies.mean())
        np.testing.assert_allclose(summary["std"], accuracies.std(ddof=1))
        return accuracies

    return finals
