"""A KerasHub ViT written out as keras_attn layers, weights carried over, and AdaViT on it."""

import re

import keras
import numpy as np
import pytest

from keras_attn.interop import convert_keras_hub_vit
from keras_attn.layers import ClassToken, PatchEmbedding, PositionEmbedding, TransformerBlock
from keras_attn.models import AdaViT, finetune_adavit
from keras_attn.testing import quick_jit_compile
from keras_attn.testing.arrays import assert_allclose, to_numpy

pytestmark = pytest.mark.backend_agnostic

IMAGES = np.random.default_rng(1).normal(size=(6, 8, 8, 3)).astype("float32")
# The written-out layers of a `ViTBackbone` of two blocks, in graph order.
WRITTEN_OUT = [
    ("vit_patching_and_embedding_patches", PatchEmbedding),
    ("vit_patching_and_embedding_class_token", ClassToken),
    ("vit_patching_and_embedding_positions", PositionEmbedding),
    ("vit_encoder_dropout", keras.layers.Dropout),
    ("vit_encoder_transformer_block_1", TransformerBlock),
    ("vit_encoder_transformer_block_2", TransformerBlock),
    ("vit_encoder_norm", keras.layers.LayerNormalization),
]


def _randomised(model, seed=0):
    """`model` with every weight drawn from N(0, 0.5²): zero biases and unit norms hide errors."""
    rng = np.random.default_rng(seed)
    for variable in model.weights:
        variable.assign(0.5 * rng.normal(size=variable.shape).astype("float32"))
    return model


def _classifier(keras_hub_backbone, **head):
    import keras_hub

    backbone = keras_hub_backbone("vit")
    return _randomised(
        keras_hub.models.ViTImageClassifier(backbone, num_classes=3, activation="softmax", **head)
    )


def _weights(model):
    return [to_numpy(variable) for variable in model.weights]


@pytest.mark.parametrize(
    "options",
    [
        {},
        # Every carried option far from its default, so a copy that drops one differs.
        {"layer_norm_epsilon": 0.5, "use_mha_bias": False, "dropout_rate": 0.3},
    ],
)
def test_backbone_is_written_out_as_keras_attn_layers_with_its_outputs(keras_hub_backbone, options):
    backbone = _randomised(keras_hub_backbone("vit", **options))
    before = _weights(backbone)
    converted = convert_keras_hub_vit(backbone)
    assert [(layer.name, type(layer)) for layer in converted.layers[1:]] == WRITTEN_OUT
    assert_allclose(to_numpy(converted(IMAGES)), to_numpy(backbone(IMAGES)), atol=1e-5, rtol=0)
    block = converted.get_layer("vit_encoder_transformer_block_1")
    assert block.normalize_first and block.num_heads == 2 and block.intermediate_dim == 16
    assert block.dropout == options.get("dropout_rate", 0.0)
    for layer, after in zip(backbone.weights, _weights(backbone), strict=True):
        assert_allclose(after, before.pop(0), atol=0, rtol=0, err_msg=layer.path)  # unchanged


@pytest.mark.usefixtures("eager_tensorflow_steps")
def test_classifier_converts_trains_saves_and_reloads(keras_hub_backbone, tmp_path):
    classifier = _classifier(keras_hub_backbone, intermediate_dim=4, dropout=0.2)
    expected = to_numpy(classifier(IMAGES))
    converted = convert_keras_hub_vit(classifier)
    assert not any(isinstance(layer, keras.Model) for layer in converted.layers)  # one graph
    assert_allclose(to_numpy(converted(IMAGES)), expected, atol=1e-5, rtol=0)
    assert_allclose(converted.predict(IMAGES, verbose=0), expected, atol=1e-5, rtol=0)
    converted.compile("adam", "sparse_categorical_crossentropy", jit_compile=quick_jit_compile())
    converted.fit(IMAGES, np.arange(6) % 3, epochs=2, batch_size=3, verbose=0)
    assert_allclose(to_numpy(classifier(IMAGES)), expected, atol=0, rtol=0)  # no weight shared
    path = tmp_path / "converted.keras"
    converted.save(path)
    reloaded = keras.saving.load_model(path)
    assert_allclose(to_numpy(reloaded(IMAGES)), to_numpy(converted(IMAGES)), atol=1e-6, rtol=0)


def test_a_model_of_your_own_around_a_backbone(keras_hub_backbone):
    backbone = _randomised(keras_hub_backbone("vit"))
    images = keras.Input((8, 8, 3))
    pooled = keras.layers.GlobalAveragePooling1D()(backbone(images))
    model = _randomised(keras.Model(images, keras.layers.Dense(2)(pooled)), seed=1)
    converted = convert_keras_hub_vit(model)
    assert sum(isinstance(layer, TransformerBlock) for layer in converted.layers) == 2
    assert_allclose(to_numpy(converted(IMAGES)), to_numpy(model(IMAGES)), atol=1e-5, rtol=0)


def test_adavit_wraps_the_converted_classifier(keras_hub_backbone):
    classifier = _classifier(keras_hub_backbone)
    vit = convert_keras_hub_vit(classifier)
    model = AdaViT(vit, target_usage=0.5)
    every = {key: np.ones_like(value) for key, value in model.decide(IMAGES).items()}
    outputs = model(IMAGES, decisions=every)  # every patch, head and sub-layer on
    assert_allclose(to_numpy(outputs), to_numpy(classifier(IMAGES)), atol=1e-5, rtol=0)
    result = model.fast_path(token_buckets=2, group_size=4).run(IMAGES, batch_size=3)
    assert_allclose(result.outputs, to_numpy(model(IMAGES)), atol=1e-5, rtol=0)
    labels = np.arange(6) % 3
    tuned = finetune_adavit(
        vit, IMAGES, labels, 0.5, 1, batch_size=3, jit_compile=quick_jit_compile()
    )
    assert np.isfinite(tuned.evaluate(IMAGES, labels, verbose=0)[0])


@pytest.mark.parametrize(
    ("option", "value"),
    [
        ("data_format", "channels_first"),
        ("patch_size", (4, 2)),
        ("use_class_token", False),
        ("use_patch_bias", False),
        ("use_mlp_bias", False),
    ],
)
def test_an_option_keras_attn_layers_do_not_compute_is_refused(keras_hub_backbone, option, value):
    shape = {"image_shape": (3, 8, 8)} if option == "data_format" else {}
    backbone = keras_hub_backbone("vit", **{option: value}, **shape)
    with pytest.raises(ValueError, match=re.escape(f"Received: {option}={value!r}")):
        convert_keras_hub_vit(backbone)


def test_a_model_without_a_keras_hub_vit_is_refused():
    inputs = keras.Input((4,))
    dense = keras.Model(inputs, keras.layers.Dense(2)(inputs), name="dense")
    with pytest.raises(ValueError, match="Received: model='dense'"):
        convert_keras_hub_vit(dense)
    with pytest.raises(ValueError, match="Received: model="):
        convert_keras_hub_vit(keras.layers.Dense(2))


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="exported from TF here")
def test_the_converted_classifier_serves_as_a_saved_model(keras_hub_backbone, tmp_path):
    import tensorflow as tf

    converted = convert_keras_hub_vit(_classifier(keras_hub_backbone))
    expected = to_numpy(converted(IMAGES))
    converted.export(str(tmp_path / "served"), format="tf_saved_model", verbose=False)
    loaded = tf.saved_model.load(str(tmp_path / "served"))  # kept: its functions use it
    assert_allclose(loaded.serve(IMAGES).numpy(), expected, atol=1e-5, rtol=0)
