import keras
import numpy as np
import pytest

from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.models import build_vision_transformer


@pytest.mark.parametrize("position_embedding", ["learned", "sincos"])
def test_builds_trains_and_saves(position_embedding, tmp_path):
    model = build_vision_transformer(
        (16, 16),
        3,
        patch_size=4,
        dim=16,
        depth=2,
        num_heads=2,
        position_embedding=position_embedding,
    )
    assert model.output_shape == (None, 3)
    attention = [layer.attention for layer in model.layers if hasattr(layer, "attention")]
    assert len(attention) == 2 and all(isinstance(a, MultiHeadSelfAttention) for a in attention)
    rng = np.random.default_rng(0)
    images = rng.normal(size=(32, 16, 16)).astype("float32")
    labels = (images[:, :8].mean((1, 2)) > 0).astype("int32")
    model.compile("adam", "sparse_categorical_crossentropy", jit_compile=True)
    history = model.fit(images, labels, epochs=3, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert model.jit_compile is True
    path = str(tmp_path / "vit.keras")
    model.save(path)
    np.testing.assert_allclose(
        keras.models.load_model(path)(images[:4]), model(images[:4]), atol=1e-5
    )


def test_bad_arguments():
    with pytest.raises(ValueError, match="Received: position_embedding='rope'"):
        build_vision_transformer((16, 16), 3, position_embedding="rope")
    with pytest.raises(ValueError, match="Received: depth=0"):
        build_vision_transformer((16, 16), 3, depth=0)
