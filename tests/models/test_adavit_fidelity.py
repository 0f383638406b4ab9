"""AdaViT computes what the official code computes, and its former behaviour on request."""

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.layers import TransformerBlock
from keras_attn.models import AdaViT, build_vision_transformer
from keras_attn.testing.adavit_reference import AdaViTNumpyReference

pytestmark = pytest.mark.backend_agnostic

FORMER = {"gate_first_block": False, "head_gates_mlp_input": False, "gated_drop_path": True}


def _model(drop_path_rate=0.0, **kwargs):
    keras.utils.set_random_seed(0)
    vit = build_vision_transformer(
        (8, 8), 3, patch_size=4, hidden_dim=8, num_layers=3, num_heads=2,
        drop_path_rate=drop_path_rate,
    )  # fmt: skip
    model = AdaViT(vit, gate_bias=0.4, seed=0, **kwargs)
    model(_images(2))
    rng = np.random.default_rng(1)  # gate kernels large enough that the decisions mix
    for gate in model.patch_gates + model.head_gates + model.block_gates:
        gate.kernel.assign(rng.normal(size=gate.kernel.shape))
    return model


def _images(batch=16):
    return np.random.default_rng(0).normal(size=(batch, 8, 8)).astype("float32")


def _numpy(x):
    return ops.convert_to_numpy(x)


@pytest.mark.parametrize(
    "options",
    [{}, {"head_gates_mlp_input": False}, {"gate_first_block": False}, FORMER],
    ids=["official", "heads-attention-only", "first-block-ungated", "former"],
)
def test_masked_path_matches_the_numpy_computation(options):
    model = _model(**options)
    images = _images()
    reference = AdaViTNumpyReference(model)
    # The gates decide (in NumPy for the reference), then mixed imposed decisions.
    expected, decided = reference.predict(images)
    for key, value in model.decide(images).items():
        np.testing.assert_array_equal(value, decided[key])
    assert 0 < decided["heads"].mean() < 1 and 0 < decided["patches"][:, 0].mean() < 1
    np.testing.assert_allclose(_numpy(model(images)), expected, atol=1e-5)
    decisions = model.random_decisions(len(images), 0.5, seed=0)
    expected, _ = reference.predict(images, decisions)
    np.testing.assert_allclose(_numpy(model(images, decisions=decisions)), expected, atol=1e-5)


def test_first_block_patches_are_gated_and_heads_reach_the_mlp_by_default():
    official, former = _model(), _model(**FORMER)
    images = _images()
    decided = official.decide(images)
    assert decided["patches"].shape == (16, 3, 4) and decided["heads"].shape == (16, 3, 2)
    assert decided["patches"][:, 0].mean() < 1  # the first block drops patches
    assert decided["heads"][:, 0].all() and decided["mlp"][:, 0].all()  # no such gates there
    assert former.decide(images)["patches"].shape == (16, 2, 4)
    # Heads off in the second block only: the official MLP loses their input channels.
    decisions = official.random_decisions(len(images), 1.0)
    decisions["heads"][:, 1, 0] = False
    options = {"gate_first_block": True, "gated_drop_path": False}
    attention_only = _model(head_gates_mlp_input=False, **options)
    outputs = [_numpy(m(images, decisions=decisions)) for m in (official, attention_only)]
    assert np.abs(outputs[0] - outputs[1]).max() > 1e-3


@pytest.mark.parametrize("gated_drop_path", [False, True])
def test_drop_path_skips_the_blocks_with_a_block_gate(gated_drop_path):
    # Drop path 0.25 and 0.5 in blocks 1 and 2: training changes a block that applies it.
    model = _model(drop_path_rate=0.5, gated_drop_path=gated_drop_path)
    x = keras.random.normal((32, 5, 8), seed=0)
    gates = {
        key: ops.cast(v[:, 0], "float32") for key, v in model.random_decisions(32, 1.0).items()
    }
    for index in (1, 2):
        inference = _numpy(model._gated_block(index, x, gates, False))
        training = _numpy(model._gated_block(index, x, gates, True))
        assert (np.abs(training - inference).max() > 1e-3) == gated_drop_path, index


def test_configs_saved_before_the_options_keep_the_former_behaviour():
    config = _model().get_config()
    for key in FORMER:
        del config[key]
    restored = AdaViT.from_config(config)
    assert {key: getattr(restored, key) for key in FORMER} == FORMER
    assert len(restored.patch_gates) == 2


def test_head_channels_need_a_width_divisible_by_the_heads():
    tokens = keras.Input((5, 9))
    x = keras.layers.Identity()(tokens)
    for _ in range(2):
        x = TransformerBlock(num_heads=2, intermediate_dim=8, key_dim=4)(x)
    backbone = keras.Model(tokens, keras.layers.Identity()(x))
    AdaViT(backbone, head_gates_mlp_input=False)
    with pytest.raises(ValueError, match="Received: dim=9 with num_heads=2"):
        AdaViT(backbone)


# One option per block: one model, one compilation.
ATTENTION_OPTIONS = [
    {"qk_scale": 256**-0.5},  # as T2T-ViT sets it
    {"logit_scale": "log_length"},
    {"additive_mask": -10000.0, "qk_scale": 0.1},
    {"attention_pattern": "causal"},
]


def _backbone(options):
    """Tokens `(5, 8)` through a block per attention option, to class probabilities."""
    keras.utils.set_random_seed(0)
    tokens = keras.Input((5, 8))
    x = keras.layers.Identity()(tokens)
    for attention_kwargs in options:
        x = TransformerBlock(num_heads=2, intermediate_dim=16, attention_kwargs=attention_kwargs)(x)
    x = keras.layers.LayerNormalization()(x)
    return keras.Model(tokens, keras.layers.Dense(3, activation="softmax")(x[:, 0]))


def test_fast_path_honours_the_attention_options():
    if keras.backend.backend() == "torch":
        pytest.skip("The fast path compiles with XLA.")
    model = AdaViT(_backbone(ATTENTION_OPTIONS), seed=0)
    tokens = np.random.default_rng(0).normal(size=(8, 5, 8)).astype("float32")
    model(tokens)
    decisions = model.random_decisions(8, 0.5, seed=0)
    decisions["heads"][:, 1:, 1] = False
    decisions["heads"][:, 1:, 0] = (np.arange(8) % 4 > 0)[:, None]  # some with no head at all
    masked = _numpy(model(tokens, decisions=decisions))
    reference, _ = AdaViTNumpyReference(model).predict(tokens, decisions)
    np.testing.assert_allclose(masked, reference, atol=1e-5)
    fast = model.fast_path(token_buckets=1, head_buckets=1)  # one branch: quick to compile
    np.testing.assert_allclose(fast.run(tokens, decisions).outputs, masked, atol=1e-5)


def test_fast_path_refuses_a_sparse_pattern():
    if keras.backend.backend() == "torch":
        pytest.skip("The fast path compiles with XLA.")
    from keras_attn.layers import LogSparseAttention

    keras.utils.set_random_seed(0)
    tokens = keras.Input((5, 8))
    x = keras.layers.Identity()(tokens)
    for _ in range(2):
        attention = LogSparseAttention(num_heads=2, key_dim=4)
        x = TransformerBlock(intermediate_dim=16, attention=attention)(x)
    model = AdaViT(keras.Model(tokens, keras.layers.Identity()(x)), seed=0)
    inputs = np.zeros((2, 5, 8), "float32")
    model(inputs)
    with pytest.raises(ValueError, match="Received: attention_pattern="):
        model.fast_path().run(inputs)
