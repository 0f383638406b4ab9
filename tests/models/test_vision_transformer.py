import numpy as np
import pytest

from keras_attn.layers import MultiHeadSelfAttention
from keras_attn.models import VIT_VARIANTS, build_vision_transformer
from keras_attn.testing.arrays import assert_reloads
from keras_attn.utils.training import build_optimizer

# DeiT, Table 1 (ViT-Ti/S/B, patch 16, 224 px): width, heads, parameters in millions.
PAPER = {"vit_tiny": (192, 3, 5), "vit_small": (384, 6, 22), "vit_base": (768, 12, 86)}


def vit_parameter_count(dim, num_layers=12, patch=16, image=224, classes=1000):
    """Parameters of a ViT (MLP four times as wide) with a class token and learned positions."""
    tokens = 1 + (image // patch) ** 2
    embedding = patch * patch * 3 * dim + dim + dim + tokens * dim  # patches, class, positions
    hidden = 4 * dim
    attention = 4 * (dim * dim + dim)
    block = attention + 4 * dim + (dim * hidden + hidden) + (hidden * dim + dim)
    return embedding + num_layers * block + 2 * dim + dim * classes + classes


# Training does not depend on the position embedding: one variant trains
# under XLA (seconds of compilation), both save and reload.
@pytest.mark.parametrize("position_embedding", ["learned", "sincos"])
def test_builds_trains_and_saves(position_embedding, tmp_path):
    model = build_vision_transformer(
        (16, 16),
        3,
        patch_size=4,
        hidden_dim=16,
        num_layers=2,
        num_heads=2,
        position_embedding=position_embedding,
    )
    assert model.output_shape == (None, 3)
    attention = [layer.attention for layer in model.layers if hasattr(layer, "attention")]
    assert len(attention) == 2 and all(isinstance(a, MultiHeadSelfAttention) for a in attention)
    rng = np.random.default_rng(0)
    images = rng.normal(size=(32, 16, 16)).astype("float32")
    if position_embedding == "learned":
        labels = (images[:, :8].mean((1, 2)) > 0).astype("int32")
        model.compile("adam", "sparse_categorical_crossentropy", jit_compile=True)
        build_optimizer(model)
        history = model.fit(images, labels, epochs=3, batch_size=16, verbose=0)
        assert history.history["loss"][-1] < history.history["loss"][0]
        assert model.jit_compile is True
    assert_reloads(model, images[:4], tmp_path / "vit.keras")


@pytest.mark.parametrize("variant", sorted(PAPER))
def test_standard_variants_have_the_papers_sizes(variant, zero_initialised):
    dim, heads, millions = PAPER[variant]
    model = build_vision_transformer((224, 224, 3), 1000, variant, patch_size=16)
    blocks = [model.get_layer(f"block_{index}") for index in range(12)]
    assert {(block.num_heads, block.intermediate_dim) for block in blocks} == {(heads, 4 * dim)}
    assert model.count_params() == vit_parameter_count(dim)
    assert int(model.count_params() / 1e6) == millions  # 5.7M, 22.1M, 86.6M


def test_variant_sizes_can_be_overridden():
    model = build_vision_transformer((32, 32), 10, "vit_small", num_layers=2, num_heads=4)
    assert (
        model.get_layer("block_1").num_heads == 4
        and model.get_layer("block_1").intermediate_dim == 1536
    )
    assert [layer.name for layer in model.layers if layer.name.startswith("block_")] == [
        "block_0",
        "block_1",
    ]
    assert VIT_VARIANTS["vit_small"]["num_layers"] == 12  # the registry is left unchanged


def test_the_mlp_is_twice_the_width_without_a_variant_unless_given():
    default = build_vision_transformer((8, 8), 3, patch_size=4, hidden_dim=8, num_layers=1)
    assert default.get_layer("block_0").intermediate_dim == 16
    given = build_vision_transformer(
        (8, 8), 3, patch_size=4, hidden_dim=8, num_layers=1, intermediate_dim=24
    )
    assert given.get_layer("block_0").intermediate_dim == 24
    assert given.get_layer("block_0").mlp_hidden.kernel.shape == (8, 24)


def test_bad_arguments():
    choices = r"one of \['vit_base', 'vit_small', 'vit_tiny'\] or None\. "
    with pytest.raises(ValueError, match=choices + "Received: variant='vit_huge'"):
        build_vision_transformer((16, 16), 3, variant="vit_huge")
    with pytest.raises(ValueError, match="Received: position_embedding='rope'"):
        build_vision_transformer((16, 16), 3, position_embedding="rope")
    with pytest.raises(ValueError, match="`num_layers`.*Received: num_layers=0"):
        build_vision_transformer((16, 16), 3, num_layers=0)
