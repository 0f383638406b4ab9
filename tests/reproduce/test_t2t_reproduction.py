import argparse
import json

import pytest

from keras_attn.reproduce import available, t2t


def test_models_compare_like_with_like():
    models = {name: t2t.build_model(name) for name in t2t.MODELS}
    # T2T-ViT and the plain ViT both see 49 tokens plus the class token.
    assert models["t2t_vit"].get_layer("position_embedding").output.shape == (None, 50, 64)
    assert models["vit"].get_layer("position_embedding").output.shape == (None, 50, 64)

    def blocks(model):
        return [layer for layer in model.layers if layer.name.startswith("block_")]

    def block_parameters(model):
        return sum(layer.count_params() for layer in blocks(model))

    # Deep-narrow and shallow-wide: block weights equal within 1%, all weights within 5%.
    deep, wide = models["deep_narrow"], models["shallow_wide"]
    assert abs(block_parameters(deep) / block_parameters(wide) - 1) < 0.01
    assert abs(deep.count_params() / wide.count_params() - 1) < 0.05
    assert (len(blocks(deep)), len(blocks(wide))) == (8, 2)


def test_summary_means_over_seeds():
    rows = [{"model": "vit", "test_accuracy": a, "parameters": 5, "macs": 7} for a in (0.5, 0.7)]
    summary = t2t.summarise(rows)
    assert list(summary) == ["vit"]
    assert summary["vit"]["mean_accuracy"] == pytest.approx(0.6)
    assert summary["vit"]["std_accuracy"] == pytest.approx(0.1)
    assert summary["vit"]["seeds"] == 2


@pytest.mark.slow
def test_reproduction_runs_end_to_end(tmp_path):
    assert available()["t2t"] is t2t
    parser = argparse.ArgumentParser()
    t2t.add_arguments(parser)
    args = parser.parse_args([])
    args.out, args.full = str(tmp_path), False
    results = t2t.run(args)
    saved = json.loads((tmp_path / "t2t.json").read_text())
    assert saved["summary"].keys() == set(t2t.MODELS)
    assert (tmp_path / "t2t.png").stat().st_size > 0
    assert all(0.0 <= row["test_accuracy"] <= 1.0 for row in results["runs"])
