import argparse
import json

import keras
import numpy as np
import pytest

from keras_attn.models import build_vision_transformer, count_macs
from keras_attn.models.adavit.training import compiled_for_finetuning
from keras_attn.reproduce import adavit_converged
from tools.docs_table_specs import TABLES
from tools.docs_tables import Results

CONFIG = {"train": 16, "validation": 8, "test": 8, "num_layers": 1}


def _data(seed=0):
    rng = np.random.default_rng(seed)

    def split(n):
        return rng.random((n, 28, 28), dtype="float32"), rng.integers(0, 10, n).astype("int32")

    return {"train": split(16), "validation": split(8), "test": split(8)}


def _adavit(data):
    keras.utils.set_random_seed(1)
    vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=8, num_layers=2)
    model, targets = compiled_for_finetuning(vit, *data["train"], 0.5, seed=3)
    model.compile(model.optimizer, model.loss, run_eagerly=True)  # no trace: seconds
    return model, targets


def _train(model, targets, data, path, epochs):
    return adavit_converged.train_epochs(
        model,
        data,
        path,
        seed=3,
        batch_size=8,
        max_epochs=epochs,
        patience=5,
        targets=targets,
        evaluate=lambda model, x, y: adavit_converged.usage_record(
            model, x, model.with_inference_rule(tempered=True)
        ),
    )


def _without_time(record):
    return {key: value for key, value in record.items() if key != "seconds"}


def test_an_interrupted_adavit_run_resumes_to_the_uninterrupted_result(tmp_path):
    data = _data()
    model, targets = _adavit(data)
    whole = _train(model, targets, data, tmp_path / "whole.npz", epochs=2)
    first, targets = _adavit(data)
    _train(first, targets, data, tmp_path / "cut.npz", epochs=1)  # stopped after one epoch
    resumed, targets = _adavit(data)
    record = _train(resumed, targets, data, tmp_path / "cut.npz", epochs=2)
    assert _without_time(record) == _without_time(whole)
    assert [entry["epoch"] for entry in record["epochs"]] == [1, 2]
    assert set(record["epochs"][0]) == {
        "epoch",
        "train_loss",
        "accuracy",
        "usage",
        "usage_loss",
        "usage_tempered",
    }
    assert int(resumed.optimizer.iterations) == int(model.optimizer.iterations) == 4
    for a, b in zip(model.get_weights(), resumed.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)


def test_training_stops_on_a_plateau_of_the_epochs_at_target_and_keeps_the_best(tmp_path):
    data = _data()
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(10)]
    )
    model.compile(keras.optimizers.SGD(0.5), "sparse_categorical_crossentropy", run_eagerly=True)
    record = adavit_converged.train_epochs(
        model, data, tmp_path / "run.npz", seed=3, batch_size=8, max_epochs=6, patience=1,
        at_target=lambda entry: entry["epoch"] >= 2,
    )  # fmt: skip
    accuracies = [entry["accuracy"] for entry in record["epochs"]]
    best = record["best_epoch"]
    # Epoch 1 never counts; the best counted epoch is followed by one more, or the budget ends.
    assert best == 2 + int(np.argmax(accuracies[1:])) and record["best_accuracy"] == max(
        accuracies[1:]
    )
    assert record["epochs_run"] == min(best + 1, 6)
    assert adavit_converged.accuracy(model, *data["validation"]) == record["best_accuracy"]


@pytest.mark.usefixtures("eager_tensorflow_steps")
def test_the_backbone_is_trained_once_and_reused_and_another_config_is_refused(tmp_path):
    data = _data()
    config = {
        **adavit_converged.backbone_config({**CONFIG, "backbone_epochs": 2, "patience": 1,
                                            "batch_size": 8, "learning_rate": 1e-3}),
    }  # fmt: skip
    vit, record = adavit_converged.trained_backbone(tmp_path, config, data)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["backbone.json", "backbone.keras"]
    assert 1 <= record["epochs_run"] <= 2 and len(record["epochs"]) == record["epochs_run"]
    saved = (tmp_path / "backbone.keras").stat().st_mtime_ns
    again, same = adavit_converged.trained_backbone(tmp_path, config, _data(seed=1))
    assert same == record and (tmp_path / "backbone.keras").stat().st_mtime_ns == saved
    for a, b in zip(vit.get_weights(), again.get_weights(), strict=True):
        np.testing.assert_array_equal(a, b)
    other = {**config, "patience": 2}
    with pytest.raises(ValueError, match="another configuration") as error:
        adavit_converged.trained_backbone(tmp_path, other, data)
    assert f"config={other!r}" in str(error.value) and f"config={config!r}" in str(error.value)
    assert json.loads((tmp_path / "backbone.json").read_text())["config"] == config


def test_the_dense_vit_has_the_macs_of_the_adavit_within_ten_percent():
    keras.utils.set_random_seed(0)
    backbone = build_vision_transformer((28, 28), 10, **adavit_converged.MODEL, num_layers=2)
    target = adavit_converged.adavit_macs(backbone, 0.5)
    assert 0.2 * count_macs(backbone) < target < 0.5 * count_macs(backbone)
    sizes = adavit_converged.equal_macs_sizes(target, (28, 28), num_layers=2)
    dense = build_vision_transformer((28, 28), 10, **sizes)
    assert abs(count_macs(dense) - target) <= 0.1 * target
    with pytest.raises(ValueError, match="Received: target_macs=1.0"):
        adavit_converged.equal_macs_sizes(1.0, (28, 28), num_layers=2)


def test_the_usage_record_gives_the_usage_of_both_rules():
    data = _data()
    model, _ = _adavit(data)
    for gate in model.patch_gates:  # logits across ±3: the two rules differ
        gate.kernel.assign(np.random.default_rng(0).normal(size=gate.kernel.shape) * 2)
    copy = model.with_inference_rule(tempered=True)
    x = data["train"][0]
    record = adavit_converged.usage_record(model, x, copy)
    assert record["usage_tempered"]["patches"] < record["usage"]["patches"]


@pytest.mark.slow
def test_a_small_run_times_every_model_once_and_plots_latency(tmp_path):
    parser = argparse.ArgumentParser()
    adavit_converged.add_arguments(parser)
    args = parser.parse_args(["--seeds", "1", "--gammas", "0.5"])
    args.out, args.full = str(tmp_path), False
    outcome = adavit_converged.run(args)
    results = json.loads(outcome["paths"]["json"].read_text())
    assert outcome["paths"]["png"].is_file()
    (entry,) = results["runs"][0]["adavit"]
    for model in adavit_converged.MODELS:
        assert set(entry[model]["latency_ms"]) == {"1", "64"}
        assert all(ms > 0 for ms in entry[model]["latency_ms"].values())
    assert results["latency"]["batches"] == [1, 64]
    state = tmp_path / adavit_converged.STATE_FOLDER
    assert (state / "latency.json").is_file() and (state / "random-like.json").is_file()
    # Random decisions matched block by block compute about what the learned ones do.
    for learned, like in (("learned", "random_like"), ("learned_tempered", "random_like_tempered")):
        assert entry[like]["macs"] == pytest.approx(entry[learned]["macs"], rel=0.05)
    assert "learned_minus_random_like" in results["summary"]["adavit"][0]
    # Run again: the runs and the latency are read back, nothing is timed again.
    again = adavit_converged.run(args)
    assert again["results"]["summary"] == results["summary"]
    # The docs tables read this format: the backbone and seven models per γ; the
    # paper's two points and the two inference rules per γ.
    (tmp_path / "adavit-converged.json").write_text(outcome["paths"]["json"].read_text())
    rows = TABLES["adavit-converged"](Results(tmp_path)).splitlines()[2:]
    assert len(rows) == 1 + 7 and rows[1].startswith("| 0.5 | learned policy |")
    rows = TABLES["adavit-converged-claims"](Results(tmp_path)).splitlines()[2:]
    assert len(rows) == 2 + 2 and rows[2].startswith("| ours: γ=0.5, official inference |")
    assert "(1/1 seeds > 0)" in rows[2] or "(0/1 seeds > 0)" in rows[2]
