import keras
import numpy as np
import pytest

from keras_attn.models import AdaViT, AdaViTFastPath, build_vision_transformer


def _vit(depth=3, seed=0):
    keras.utils.set_random_seed(seed)
    return build_vision_transformer((8, 8), 3, patch_size=4, dim=8, depth=depth, num_heads=2)


def _images(batch=16, seed=0):
    return np.random.default_rng(seed).normal(size=(batch, 8, 8)).astype("float32")


def _model(gate_bias=0.2, depth=3, **kwargs):
    model = AdaViT(_vit(depth), gate_bias=gate_bias, seed=0, **kwargs)
    model(_images(2))
    return model


def _random_decisions(batch, blocks, seed=0):
    rng = np.random.default_rng(seed)
    decisions = {
        "patches": rng.random((batch, blocks, 4)) < 0.5,
        "heads": rng.random((batch, blocks, 2)) < 0.5,
        "attention": rng.random((batch, blocks)) < 0.7,
        "mlp": rng.random((batch, blocks)) < 0.7,
    }
    decisions["patches"][0] = False  # only the class token is kept
    decisions["heads"][1] = False  # attention on, no head: the output bias only
    decisions["attention"][1] = True
    decisions["attention"][2] = decisions["mlp"][2] = False  # the whole block skipped
    return decisions


def test_fast_path_matches_masked_path_with_learned_gates():
    model = _model()
    images = _images()
    decisions = model.decide(images)
    for key in ("patches", "heads", "attention", "mlp"):
        assert 0 < decisions[key].mean() < 1, key  # the gates really mix
    result = model.fast_path().predict(images)
    for key, value in decisions.items():
        np.testing.assert_array_equal(result.decisions[key], value)
    np.testing.assert_allclose(result.outputs, keras.ops.convert_to_numpy(model(images)), atol=1e-5)


def test_fast_path_matches_masked_path_with_fixed_decisions():
    model = _model()
    images = _images()
    decisions = _random_decisions(len(images), 2)
    masked = keras.ops.convert_to_numpy(model(images, decisions=decisions))
    result = model.fast_path().predict(images, decisions=decisions)
    np.testing.assert_allclose(result.outputs, masked, atol=1e-5)
    # One example at a time (batch 1, nothing padded) gives the same.
    single = [
        model.fast_path().predict(
            images[i : i + 1], {k: v[i : i + 1] for k, v in decisions.items()}
        )
        for i in range(3)
    ]
    np.testing.assert_allclose(np.concatenate([s.outputs for s in single]), masked[:3], atol=1e-5)


def test_all_gates_on_is_the_backbone():
    model = _model(gate_bias=50.0)
    images = _images()
    expected = keras.ops.convert_to_numpy(model.backbone(images))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(images)), expected, atol=1e-6)
    fast = model.fast_path()
    assert fast.stem is not None and fast.readout is not None  # the builder's: all NumPy
    np.testing.assert_allclose(fast.predict(images).outputs, expected, atol=1e-5)
    np.testing.assert_allclose(fast.predict_full(images), expected, atol=1e-5)


def test_everything_off_passes_tokens_through_the_gated_blocks():
    model = _model()
    images = _images(4)
    off = {
        "patches": np.zeros((4, 2, 4), bool),
        "heads": np.zeros((4, 2, 2), bool),
        "attention": np.zeros((4, 2), bool),
        "mlp": np.zeros((4, 2), bool),
    }
    expected = model.readout(model.blocks[0](model.stem(images)))
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(model(images, decisions=off)),
        keras.ops.convert_to_numpy(expected),
        atol=1e-6,
    )
    result = model.fast_path().predict(images, decisions=off)
    np.testing.assert_allclose(result.outputs, keras.ops.convert_to_numpy(expected), atol=1e-5)


def test_macs_by_hand():
    # dim 8, 2 heads of 4, MLP 16, 4 patches + class token, 3 classes.
    fast = _model(depth=2).fast_path()
    # Patch embedding 4 * (16 * 8) + head 8 * 3; a full block: projections
    # 5 * 8 * 2 * 16, attention 2 * 25 * 8, MLP 2 * 5 * 8 * 16.
    assert fast.full_macs() == 536 + 2 * (1280 + 400 + 1280)
    decisions = {
        "patches": np.array([[[True, False, True, False]], [[True] * 4]]),
        "heads": np.array([[[False, True]], [[True, True]]]),
        "attention": np.array([[True], [True]]),
        "mlp": np.array([[False], [True]]),
    }
    # Example 0: 3 tokens and 1 head: projections 3 * 8 * 16, attention 9 * 8;
    # gates 4 * 8 + 8 * (2 + 2). Example 1 keeps everything, plus the gates.
    np.testing.assert_array_equal(
        fast.macs(decisions), [536 + 2960 + 384 + 72 + 64, 536 + 2 * 2960 + 64]
    )


def test_usage_loss_by_hand():
    model = _model(target_usage=0.5)
    decisions = {
        "patches": np.tile([True, False, False, False], (2, 2, 1)),  # usage 0.25
        "heads": np.tile([True, False], (2, 2, 1)),  # usage 0.5
        "attention": np.array([[True, False], [True, False]]),
        "mlp": np.ones((2, 2), bool),  # block usage 0.75
    }
    model(_images(2), training=True, decisions=decisions)
    loss = float(keras.ops.convert_to_numpy(model.losses[0]))
    assert loss == pytest.approx(2 * 0.0 + 2 * 0.25 + 2 * 0.25**2)


def test_xla_fit_lowers_usage_and_save_round_trip(tmp_path):
    model = AdaViT(_vit(depth=2), target_usage=0.2, gate_bias=1.0, seed=0)
    images, labels = _images(64), np.arange(64) % 3
    model.compile(keras.optimizers.Adam(0.05), "sparse_categorical_crossentropy", jit_compile=True)
    before = {k: v.mean() for k, v in model.decide(images).items()}
    history = model.fit(images, labels, epochs=4, batch_size=32, verbose=0)
    after = {k: v.mean() for k, v in model.decide(images).items()}
    assert model.jit_compile is True and np.isfinite(history.history["loss"]).all()
    assert after["heads"] < before["heads"] and after["mlp"] < before["mlp"]
    path = str(tmp_path / "adavit.keras")
    model.save(path)
    reloaded = keras.models.load_model(path)
    assert isinstance(reloaded, AdaViT) and reloaded.target_usage == (0.2, 0.2, 0.2)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(reloaded(images)),
        keras.ops.convert_to_numpy(model(images)),
        atol=1e-6,
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: target_usage=0"):
        AdaViT(_vit(), target_usage=0)
    with pytest.raises(ValueError, match=r"Received: target_usage=\(0.5, 0.5\)"):
        AdaViT(_vit(), target_usage=(0.5, 0.5))
    with pytest.raises(ValueError, match="Received: backbone='vision_transformer' with 1 blocks"):
        AdaViT(_vit(depth=1))
    with pytest.raises(ValueError, match="Received: model with built=False"):
        AdaViTFastPath(AdaViT(_vit()))
