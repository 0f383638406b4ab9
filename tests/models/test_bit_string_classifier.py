import keras
import numpy as np
import pytest

from keras_attn.datasets import make_bit_strings
from keras_attn.models import bit_string_logits, build_bit_string_classifier
from keras_attn.testing.arrays import assert_reloads
from keras_attn.utils.training import build_optimizer


@pytest.mark.parametrize("task", ["first", "parity"])
def test_logit_scale_reaches_every_attention_layer_and_any_length_works(task):
    model = build_bit_string_classifier(task, num_layers=2, logit_scale="log_length")
    blocks = [layer for layer in model.layers if layer.name.startswith("block_")]
    assert [block.attention.logit_scale for block in blocks] == ["log_length"] * 2
    assert [block.normalize_first for block in blocks] == [False, False]
    for length in (5, 40):
        tokens, _ = make_bit_strings(3, length, task, seed=length)
        assert model(tokens).shape == (3, 1)


def test_log_length_scaling_changes_the_outputs():
    keras.utils.set_random_seed(0)
    plain = build_bit_string_classifier("first")
    scaled = build_bit_string_classifier("first", logit_scale="log_length")
    scaled.set_weights(plain.get_weights())
    tokens, _ = make_bit_strings(4, 30, "first", seed=0)
    assert not np.allclose(plain(tokens), scaled(tokens), atol=1e-4)


def test_trains_on_first_and_saves(tmp_path):
    keras.utils.set_random_seed(0)
    model = build_bit_string_classifier("first", logit_scale="log_length")
    model.compile(
        keras.optimizers.Adam(1e-2),
        keras.losses.BinaryCrossentropy(from_logits=True),
        jit_compile=False,
    )
    tokens, labels = make_bit_strings(256, 8, "first", seed=0)
    build_optimizer(model)
    history = model.fit(tokens, labels, batch_size=32, epochs=2, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert_reloads(model, tokens[:4], tmp_path / "first.keras")


def test_logits_in_batches_equal_one_call():
    model = build_bit_string_classifier("first")
    tokens, _ = make_bit_strings(7, 6, "first", seed=0)
    whole = keras.ops.convert_to_numpy(model(tokens, training=False))[:, 0]  # (7,)
    batched = bit_string_logits(model, tokens, batch_size=3)  # 3 + 3 + 1
    np.testing.assert_allclose(batched, whole, atol=1e-6)
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        bit_string_logits(model, tokens, batch_size=0)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: logit_scale='log'"):
        build_bit_string_classifier(logit_scale="log")
    with pytest.raises(ValueError, match="Received: num_layers=0"):
        build_bit_string_classifier(num_layers=0)
    with pytest.raises(ValueError, match="Received: positions='sinusoidal'"):
        build_bit_string_classifier(positions="sinusoidal")


@pytest.mark.usefixtures("eager_tensorflow_steps")
def test_learned_scale_positions_are_trained_and_reload(tmp_path):
    keras.utils.set_random_seed(0)
    model = build_bit_string_classifier("parity", num_heads=2, positions="learned_scale")
    encoding = model.get_layer("positions")
    assert type(encoding).__name__ == "LearnedScalePositions" and encoding.width == 16
    before = np.asarray(encoding.log_scales).copy()
    model.compile(keras.optimizers.Adam(1e-2), keras.losses.BinaryCrossentropy(from_logits=True))
    tokens, labels = make_bit_strings(64, 10, "parity", seed=0)
    build_optimizer(model)
    model.fit(tokens, labels, batch_size=16, epochs=1, verbose=0)
    assert not np.allclose(np.asarray(encoding.log_scales), before)  # γ is learned
    assert_reloads(model, tokens[:4], tmp_path / "parity.keras")
