import keras
import numpy as np
import pytest

from keras_attn.layers import MultiHeadSelfAttention, TransformerBlock
from keras_attn.models import build_decoder_language_model
from keras_attn.testing.arrays import assert_reloads
from keras_attn.utils.training import build_optimizer


def test_causal_trains_and_saves(tmp_path):
    model = build_decoder_language_model(
        40, 10, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32
    )
    blocks = [layer for layer in model.layers if isinstance(layer, TransformerBlock)]
    assert [b.name for b in blocks] == ["block_0", "block_1"]
    assert all(isinstance(b.attention, MultiHeadSelfAttention) for b in blocks)
    assert model.get_layer("output_embedding").kernel.shape == (16, 40)
    rng = np.random.default_rng(0)
    tokens = rng.integers(1, 40, size=(3, 10)).astype("int32")
    changed = tokens.copy()
    changed[:, 6:] = rng.integers(1, 40, size=(3, 4))
    # Logits at position t depend on tokens up to t only.
    np.testing.assert_allclose(model(tokens)[:, :6], model(changed)[:, :6], atol=1e-5)
    assert not np.allclose(model(tokens)[:, 6:], model(changed)[:, 6:])
    inputs, targets = tokens[:, :-1], tokens[:, 1:]
    model.compile(
        "adam",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=0),
        jit_compile=True,
    )
    build_optimizer(model)
    history = model.fit(inputs, targets, epochs=3, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert_reloads(model, inputs, tmp_path / "lm.keras")


def test_padding_does_not_change_real_positions():
    model = build_decoder_language_model(
        20, 8, hidden_dim=8, num_layers=1, num_heads=2, intermediate_dim=8
    )
    tokens = np.array([[3, 4, 5, 0, 0, 0]], "int32")
    np.testing.assert_allclose(model(tokens)[:, :3], model(tokens[:, :3]), atol=1e-5)


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: vocabulary_size=0"):
        build_decoder_language_model(0, 8)
    with pytest.raises(ValueError, match="`num_layers`.*Received: num_layers=-1"):
        build_decoder_language_model(10, 8, num_layers=-1)
