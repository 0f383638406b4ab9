import keras
import numpy as np
import pytest

from keras_attn.layers import T2TModule, TokenPerformer, TokenTransformer
from keras_attn.models import T2T_VIT_VARIANTS, build_t2t_vit, build_vision_transformer, count_macs
from keras_attn.testing.arrays import assert_reloads
from keras_attn.utils.training import build_optimizer

# Paper, Table 2 and 4: parameters (millions) and MACs (billions) at 224 px, 1000 classes.
PAPER = {
    "t2t_vit_7": (4.3, 1.1),
    "t2t_vit_10": (5.9, 1.5),
    "t2t_vit_12": (6.9, 1.8),
    "t2t_vit_14": (21.5, 4.8),
    "t2t_vit_19": (39.2, 8.5),
    "t2t_vit_24": (64.1, 13.8),
    "t2t_vit_t_14": (21.5, 6.1),
}
MACS_DIFFERENT_FROM_PAPER = {"t2t_vit_24": 13.7}
BACKBONES = {  # Paper, Table 1: hidden size, depth, MLP size
    "t2t_vit_7": (256, 7, 512),
    "t2t_vit_10": (256, 10, 512),
    "t2t_vit_12": (256, 12, 512),
    "t2t_vit_14": (384, 14, 1152),
    "t2t_vit_19": (448, 19, 1344),
    "t2t_vit_24": (512, 24, 1536),
    "t2t_vit_t_14": (384, 14, 1152),
}


def official_parameter_count(variant):
    """`sum(p.numel() for p in model.parameters())` of the official PyTorch model.

    Written from the official module definitions: frozen tensors (the
    position table, the Performer's random features) are parameters too.
    """
    hidden_dim, num_layers, intermediate_dim = BACKBONES[variant]

    def linear(n_in, n_out, bias=True):
        return n_in * n_out + (n_out if bias else 0)

    def token_layer(dim, token_dim=64):
        performer = "_t_" not in variant
        attention = linear(dim, 3 * token_dim, bias=performer) + linear(token_dim, token_dim)
        random_features = token_dim // 2 * token_dim if performer else 0
        norms = 2 * dim + 2 * token_dim
        return norms + attention + 2 * linear(token_dim, token_dim) + random_features

    block = (
        4 * hidden_dim
        + linear(hidden_dim, 3 * hidden_dim, bias=False)
        + linear(hidden_dim, hidden_dim)
        + linear(hidden_dim, intermediate_dim)
        + linear(intermediate_dim, hidden_dim)
    )
    t2t = token_layer(147) + token_layer(576) + linear(576, hidden_dim)
    backbone = hidden_dim + 197 * hidden_dim + num_layers * block + 2 * hidden_dim
    return t2t + backbone + linear(hidden_dim, 1000)


@pytest.mark.parametrize("variant", sorted(PAPER))
def test_parameters_and_macs_match_the_paper(variant, zero_initialised):
    model = build_t2t_vit((224, 224, 3), 1000, variant=variant)
    params, macs = PAPER[variant]
    assert model.count_params() == official_parameter_count(variant)
    assert round(model.count_params() / 1e6, 1) == params
    token_type = TokenTransformer if "_t_" in variant else TokenPerformer
    assert all(isinstance(t, token_type) for t in model.get_layer("tokens_to_token").token_layers)
    # The analytic count rounds to the paper's MACs, except T2T-ViT-24: 13.66G
    # (13.7) against a reported 13.8G, 1% lower.
    assert round(count_macs(model) / 1e9, 1) == MACS_DIFFERENT_FROM_PAPER.get(variant, macs)


def test_small_model_trains_under_xla_and_saves(tmp_path, small_t2t_vit):
    model = small_t2t_vit(seed=0)
    assert model.output_shape == (None, 3)
    assert model.get_layer("position_embedding").output.shape == (None, 37, 16)
    attention = model.get_layer("block_0").attention
    assert attention.query_dense.bias is None and attention.output_dense.bias is not None
    rng = np.random.default_rng(0)
    images = rng.normal(size=(32, 12, 12)).astype("float32")
    labels = (images[:, :6].mean((1, 2)) > 0).astype("int32")
    model.compile(keras.optimizers.Adam(3e-3), "sparse_categorical_crossentropy", jit_compile=True)
    build_optimizer(model)
    history = model.fit(images, labels, epochs=3, batch_size=16, verbose=0)
    assert history.history["loss"][-1] < history.history["loss"][0]
    assert_reloads(model, images[:4], tmp_path / "t2t.keras")


def test_variant_defaults_and_overrides():
    model = build_t2t_vit((32, 32, 3), 5, variant="t2t_vit_t_14", num_layers=1, token_dim=8)
    module = model.get_layer("tokens_to_token")
    assert isinstance(module, T2TModule) and module.token_layer == "transformer"
    assert module.hidden_dim == 384 and model.get_layer("block_0").num_heads == 6
    assert model.get_layer("block_0").intermediate_dim == 1152
    assert model.name == "t2t_vit_t_14"
    performer = build_t2t_vit((32, 32, 3), 5, variant="t2t_vit_7", num_layers=1, token_dim=8)
    assert performer.get_layer("tokens_to_token").token_layer == "performer"
    swapped = build_t2t_vit(
        (32, 32, 3), 5, variant="t2t_vit_7", num_layers=1, token_dim=8, token_layer="transformer"
    )
    assert swapped.get_layer("tokens_to_token").token_layer == "transformer"


def test_each_variant_stores_its_sizes_and_token_layer():
    for name, variant in T2T_VIT_VARIANTS.items():
        assert set(variant) == {
            "hidden_dim",
            "num_layers",
            "num_heads",
            "intermediate_dim",
            "token_layer",
        }
        sizes = (variant["hidden_dim"], variant["num_layers"], variant["intermediate_dim"])
        assert sizes == BACKBONES[name.replace("_t_", "_")], name
        # The paper's T2T-ViT_t-* use transformer token layers, the others Performers.
        expected = "transformer" if name.startswith("t2t_vit_t_") else "performer"
        assert variant["token_layer"] == expected, name


def test_bad_arguments():
    listed = r"'t2t_vit_t_24'\] or None\. "
    with pytest.raises(ValueError, match=listed + "Received: variant='t2t_vit_8'"):
        build_t2t_vit(variant="t2t_vit_8")
    with pytest.raises(ValueError, match="`hidden_dim`.*Received: hidden_dim=None"):
        build_t2t_vit(variant=None, num_layers=2, num_heads=2, intermediate_dim=32)
    with pytest.raises(ValueError, match="`intermediate_dim`.*Received: intermediate_dim=None"):
        build_t2t_vit(variant=None, hidden_dim=16, num_layers=2, num_heads=2)
    with pytest.raises(ValueError, match="Received: num_classes=0"):
        build_t2t_vit(num_classes=0)


SMALL = {
    "variant": None,
    "hidden_dim": 16,
    "num_layers": 3,
    "num_heads": 2,
    "intermediate_dim": 32,
    "token_dim": 4,
    "kernel_sizes": (3, 3, 3),
    "strides": (2, 2, 1),
    "paddings": (1, 1, 1),
}


def _blocks(model):
    return [layer for layer in model.layers if layer.name.startswith("block_")]


def test_qk_scale_reaches_every_block():
    """The official pretrained T2T-ViT-7 scales by 256 ** -0.5, not by its head size 64 ** -0.5."""
    scale = 256**-0.5
    model = build_t2t_vit((12, 12), 3, qk_scale=scale, seed=0, **SMALL)
    assert all(block.attention.query_key_scale == scale for block in _blocks(model))
    default = build_t2t_vit((12, 12), 3, seed=0, **SMALL)
    assert all(
        block.attention.query_key_scale == pytest.approx(8**-0.5) for block in _blocks(default)
    )
    clone = keras.Model.from_config(model.get_config())
    assert all(block.attention.qk_scale == scale for block in _blocks(clone))
    with pytest.raises(ValueError, match="Received: qk_scale=-1.0"):
        build_t2t_vit((12, 12), 3, qk_scale=-1.0, **SMALL)


def test_drop_path_rates_rise_linearly_over_the_blocks():
    t2t = build_t2t_vit((12, 12), 3, drop_path_rate=0.1, **{**SMALL, "num_layers": 5})
    vit = build_vision_transformer(
        (12, 12), 3, patch_size=4, hidden_dim=8, num_layers=5, drop_path_rate=0.1
    )
    expected = [0.0, 0.025, 0.05, 0.075, 0.1]
    for model in (t2t, vit):
        np.testing.assert_allclose([b.drop_path_rate for b in _blocks(model)], expected)
    single = build_vision_transformer((12, 12), 3, num_layers=1, drop_path_rate=0.1)
    assert [b.drop_path_rate for b in _blocks(single)] == [0.0]
    with pytest.raises(ValueError, match="Received: drop_path_rate=1.0"):
        build_t2t_vit((12, 12), 3, drop_path_rate=1.0, **SMALL)
    with pytest.raises(ValueError, match="Received: drop_path_rate=-0.1"):
        build_vision_transformer((12, 12), 3, drop_path_rate=-0.1)


def test_patch_tokenizer_changes_only_the_tokenizer():
    """`tokenizer="patches"`: same backbone, layer by layer, on the same 49 tokens.

    With the backbone weights of the T2T model copied over, both backbones
    map the same tokens to the same probabilities, so nothing but the
    tokenizer differs (no query/key/value bias, same 1D positions, ...).
    """
    t2t = build_t2t_vit((28, 28), 10, seed=0, **SMALL)
    patches = build_t2t_vit((28, 28), 10, tokenizer="patches", **SMALL)
    assert patches.get_layer("patch_embedding").patch_size == 4  # 2 * 2 * 1
    assert t2t.layers[1].name == "tokens_to_token" and patches.layers[1].name == "patch_embedding"
    after_t2t, after_patches = t2t.layers[2:], patches.layers[2:]
    assert [layer.name for layer in after_t2t] == [layer.name for layer in after_patches]
    for ours, theirs in zip(after_t2t, after_patches, strict=True):
        assert type(ours) is type(theirs)
        assert [w.shape for w in ours.weights] == [w.shape for w in theirs.weights]
        theirs.set_weights(ours.get_weights())
    for model in (t2t, patches):
        assert model.get_layer("position_embedding").output.shape == (None, 50, 16)
    tokens = np.random.default_rng(0).normal(size=(2, 49, 16)).astype("float32")

    def backbone(model):
        return keras.Model(model.layers[1].output, model.output)

    np.testing.assert_allclose(backbone(t2t)(tokens), backbone(patches)(tokens), atol=1e-6)


def test_bad_tokenizer_arguments():
    with pytest.raises(ValueError, match="Received: tokenizer='conv'"):
        build_t2t_vit((28, 28), 10, tokenizer="conv", **SMALL)
    with pytest.raises(ValueError, match="Received: patch_size=4 with tokenizer='t2t'"):
        build_t2t_vit((28, 28), 10, patch_size=4, **SMALL)
    with pytest.raises(ValueError, match="Received: patch_size=0"):
        build_t2t_vit((28, 28), 10, tokenizer="patches", patch_size=0, **SMALL)
