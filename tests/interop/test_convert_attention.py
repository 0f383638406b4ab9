"""keras_attn attention in existing Keras and KerasHub models, weights carried over."""

import inspect

import keras
import numpy as np
import pytest

from keras_attn.interop import (
    ConvertedAttentionBlock,
    convert_attention,
    find_attention_layers,
    find_feed_forward_layers,
    find_layers,
    from_keras_attention,
)
from keras_attn.layers import LogSparsePattern, MultiHeadSelfAttention
from keras_attn.testing import quick_jit_compile
from keras_attn.testing.arrays import assert_allclose, to_numpy

pytestmark = pytest.mark.backend_agnostic

X = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")


def _keras_attention():
    layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=3, seed=1)
    layer(X, X)
    return layer


def _assert_outputs_equal(a, b, atol=1e-5):
    for x, y in zip(keras.tree.flatten(a), keras.tree.flatten(b), strict=True):
        assert_allclose(to_numpy(x), to_numpy(y), atol=atol, rtol=0)


def _fit_save_reload(model, inputs, tmp_path):
    """Fits two steps, saves to `.keras`, and checks the reloaded outputs."""
    targets = keras.tree.map_structure(
        np.zeros_like, keras.tree.map_structure(to_numpy, model(inputs))
    )
    model.compile("adam", loss="mse", run_eagerly=True)
    model.fit(inputs, targets, epochs=2, batch_size=2, verbose=0)
    path = tmp_path / "converted.keras"
    model.save(path)
    reloaded = keras.saving.load_model(path)
    _assert_outputs_equal(reloaded(inputs), model(inputs), atol=1e-6)
    return reloaded


def test_keras_style_self_attention_call_equals_keras_attention():
    reference = _keras_attention()
    layer = from_keras_attention(reference)
    padding = np.ones((2, 1, 6), "int32")
    padding[0, 0, 4:] = 0
    _assert_outputs_equal(layer(query=X, value=X, key=X), reference(X, X))
    _assert_outputs_equal(layer(X, X, use_causal_mask=True), reference(X, X, use_causal_mask=True))
    scores = layer(query=X, value=X, attention_mask=padding, return_attention_scores=True)
    expected = reference(X, X, attention_mask=padding, return_attention_scores=True)
    _assert_outputs_equal(scores, expected)


def test_keras_style_call_refuses_cross_attention_and_a_cache():
    layer = from_keras_attention(_keras_attention())
    with pytest.raises(ValueError, match=r"cross-attention is not supported\)\. Received: value"):
        layer(query=X, value=X + 1.0)
    with pytest.raises(ValueError, match="Received: cache"):
        layer(query=X, value=X, cache=X)
    with pytest.raises(ValueError, match="static_offsets"):
        MultiHeadSelfAttention(2, 3, attention_pattern=_GatheredPattern())(X, use_causal_mask=True)


class _GatheredPattern(LogSparsePattern):
    """LogSparse keys read by gathering: no `static_offsets`."""

    def static_offsets(self, length):
        return None


def test_conversion_refuses_what_it_cannot_carry_over():
    with pytest.raises(ValueError, match="num_heads"):
        from_keras_attention(_keras_attention(), num_heads=4)
    gated = keras.layers.MultiHeadAttention(2, 3, use_gate=True, name="gated")
    gated(X, X)
    with pytest.raises(ValueError, match="'gated' cannot be converted.*use_gate"):
        from_keras_attention(gated)
    cross = keras.layers.MultiHeadAttention(2, 3, name="cross")
    cross(X, X[..., :4])
    with pytest.raises(ValueError, match="'cross' cannot be converted"):
        from_keras_attention(cross)
    with pytest.raises(ValueError, match="functional or Sequential"):
        convert_attention(keras.Model())


def test_a_keras_hub_backbone_with_attention_of_its_own_is_refused():
    import keras_hub

    llama = keras_hub.models.LlamaBackbone(
        vocabulary_size=30,
        num_layers=1,
        num_query_heads=2,
        num_key_value_heads=2,
        hidden_dim=8,
        intermediate_dim=16,
    )
    with pytest.raises(ValueError, match="no `keras.layers.MultiHeadAttention`.*llama_backbone"):
        convert_attention(llama)


def test_keras_attention_model_converts_then_takes_logsparse(tmp_path):
    keras.utils.set_random_seed(0)
    inputs = keras.Input((None, 8))
    hidden = keras.layers.MultiHeadAttention(2, 4, name="attention")(
        inputs, inputs, use_causal_mask=True
    )
    model = keras.Model(inputs, keras.layers.Dense(3, name="head")(hidden + inputs))
    _assert_outputs_equal(convert_attention(model)(X), model(X))

    converted = convert_attention(model, attention_pattern=LogSparsePattern())
    attention = converted.get_layer("attention")
    assert isinstance(attention, MultiHeadSelfAttention) and attention.is_sparse
    # Six positions: LogSparse drops key 1 of query 5 (offsets 0, 1, 2, 4).
    assert not np.allclose(to_numpy(converted(X)), to_numpy(model(X)), atol=1e-5)
    reloaded = _fit_save_reload(converted, X, tmp_path)
    assert reloaded.get_layer("attention").is_sparse
    model_weights = model.get_layer("head").get_weights()[0]
    assert not np.allclose(converted.get_layer("head").get_weights()[0], model_weights)


def test_the_converted_copy_shares_no_weight_with_the_original():
    inputs = keras.Input((6, 8))
    model = keras.Model(inputs, keras.layers.MultiHeadAttention(2, 4, seed=1)(inputs, inputs))
    expected = to_numpy(model(X))
    converted = convert_attention(model)
    # Compiled steps on JAX donate the model's weight buffers: a shared buffer would be deleted.
    converted.compile("adam", loss="mse", jit_compile=quick_jit_compile())
    converted.predict(X, verbose=0)
    converted.fit(X, np.zeros_like(X), verbose=0)
    assert_allclose(to_numpy(model(X)), expected, atol=0, rtol=0)


def _bert_inputs():
    rng = np.random.default_rng(1)
    padding = np.ones((2, 6), "int32")
    padding[1, 4:] = 0
    return {
        "token_ids": rng.integers(0, 30, (2, 6)).astype("int32"),
        "segment_ids": np.zeros((2, 6), "int32"),
        "padding_mask": padding,
    }


def test_bert_backbone_converts_then_takes_log_length_scaling(tmp_path, keras_hub_backbone):
    keras.utils.set_random_seed(0)
    backbone = keras_hub_backbone("bert")
    for index in range(2):
        # Larger logits than BERT's initializer gives, so that scaling them shows.
        block = backbone.get_layer(f"transformer_layer_{index}")
        query = block._self_attention_layer.query_dense.kernel
        query.assign(query * 100.0)
    inputs = _bert_inputs()
    _assert_outputs_equal(convert_attention(backbone)(inputs), backbone(inputs))

    converted = convert_attention(backbone, logit_scale="log_length")
    block = converted.get_layer("transformer_layer_1")
    assert isinstance(block, ConvertedAttentionBlock)
    assert block.layer._self_attention_layer.logit_scale == "log_length"
    reference = to_numpy(backbone(inputs)["sequence_output"])
    assert not np.allclose(to_numpy(converted(inputs)["sequence_output"]), reference, atol=1e-5)
    reloaded = _fit_save_reload(converted, inputs, tmp_path)
    layer = reloaded.get_layer("transformer_layer_1").layer._self_attention_layer
    assert isinstance(layer, MultiHeadSelfAttention) and layer.logit_scale == "log_length"
    trained = {id(v) for v in converted.trainable_variables}
    assert all(id(v) in trained for v in block.layer._self_attention_layer.weights)
    assert len(converted.trainable_variables) == len(backbone.trainable_variables)


def test_gpt2_backbone_takes_a_logsparse_pattern_with_its_padding(keras_hub_backbone, tmp_path):
    """GPT-2's decoder passes its padding and causal masks as one `attention_mask`."""
    keras.utils.set_random_seed(0)
    backbone = keras_hub_backbone("gpt2")
    inputs = _bert_inputs()  # 6 positions, the last two of example 1 padded
    del inputs["segment_ids"]
    # A local window of 6 reaches every earlier key: the causal model again.
    every_key = convert_attention(backbone, attention_pattern=LogSparsePattern("local", 6))
    _assert_outputs_equal(every_key(inputs), backbone(inputs))
    converted = convert_attention(backbone, attention_pattern=LogSparsePattern())
    pure = to_numpy(converted(inputs))
    assert np.isfinite(pure).all()
    assert not np.allclose(pure[:, 5], to_numpy(backbone(inputs))[:, 5], atol=1e-4)
    _fit_save_reload(converted, inputs, tmp_path)


def _keras_hub_inputs(name):
    if name == "vit":
        return np.random.default_rng(2).normal(size=(2, 8, 8, 3)).astype("float32")
    inputs = _bert_inputs()
    if name == "gpt2":
        del inputs["segment_ids"]
    return inputs


@pytest.mark.parametrize("name", ["bert", "gpt2", "vit"])
def test_keras_hub_backbone_converts_every_attention_layer_and_reloads(
    keras_hub_backbone, name, tmp_path
):
    """The backbones docs/your-models.md lists as converting."""
    keras.utils.set_random_seed(0)
    backbone = keras_hub_backbone(name)
    inputs = _keras_hub_inputs(name)
    converted = convert_attention(backbone)
    layers = find_attention_layers(converted).values()
    assert len(layers) == 2
    assert all(isinstance(layer, MultiHeadSelfAttention) for layer in layers)
    _assert_outputs_equal(converted(inputs), backbone(inputs))
    converted.save(tmp_path / "converted.keras")
    reloaded = keras.saving.load_model(tmp_path / "converted.keras")
    _assert_outputs_equal(reloaded(inputs), backbone(inputs))


def test_vit_backbone_converts_around_its_patch_embedding_config(keras_hub_backbone, tmp_path):
    """`ViTPatchingAndEmbedding.from_config` fails on its own config (`num_patches`)."""
    keras.utils.set_random_seed(0)
    backbone = keras_hub_backbone("vit")
    embedding = backbone.get_layer("vit_patching_and_embedding")
    with pytest.raises(TypeError, match="num_patches"):
        embedding.from_config(embedding.get_config())
    converted = convert_attention(backbone, logit_scale="log_length")
    copied = converted.get_layer("vit_patching_and_embedding")
    assert isinstance(copied, ConvertedAttentionBlock)
    assert "num_patches" not in copied.get_config()["layer"]["config"]
    encoder = converted.get_layer("vit_encoder").layer
    assert encoder.encoder_layers[1].mha.logit_scale == "log_length"
    images = _keras_hub_inputs("vit")
    _assert_outputs_equal(copied(images), embedding(images))
    reloaded = _fit_save_reload(converted, images, tmp_path)
    assert reloaded.get_layer("vit_encoder").layer.encoder_layers[0].mha.logit_scale == "log_length"


@keras.saving.register_keras_serializable(package="keras_attn_tests")
class _RenamedArgument(keras.layers.Layer):
    """Writes its argument `size` as `width`, which its constructor does not take."""

    def __init__(self, size=2, **kwargs):
        super().__init__(**kwargs)
        self.size = size

    def build(self, input_shape):
        self.kernel = self.add_weight((input_shape[-1], self.size))

    def call(self, inputs):
        return inputs @ self.kernel

    def get_config(self):
        return {**super().get_config(), "width": self.size}


def test_a_layer_that_its_config_does_not_rebuild_is_refused_by_name():
    inputs = keras.Input((6, 8))
    hidden = keras.layers.MultiHeadAttention(2, 4, name="attention")(inputs, inputs)
    model = keras.Model(inputs, _RenamedArgument(3, name="renamed")(hidden))
    weights = [to_numpy(weight) for weight in model.weights]
    with pytest.raises(
        ValueError, match="'renamed' cannot be copied.*from_config.*Received: config"
    ):
        convert_attention(model)
    for weight, before in zip(model.weights, weights, strict=True):
        np.testing.assert_array_equal(to_numpy(weight), before)


def test_a_converted_backbone_keeps_the_layer_paths_of_the_original(keras_hub_backbone):
    """The wrapper of a converted block carries the block's name: no doubled path segment."""
    backbone = keras_hub_backbone("bert")
    inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in _bert_inputs()}
    classifier = keras.Model(inputs, keras.layers.Dense(2)(backbone(inputs)["pooled_output"]))
    for model in (backbone, classifier):
        converted = convert_attention(model)
        attention = find_attention_layers(converted)
        assert list(attention) == list(find_attention_layers(model))
        assert all(isinstance(layer, MultiHeadSelfAttention) for layer in attention.values())
        assert list(find_feed_forward_layers(converted)) == list(find_feed_forward_layers(model))
    assert list(attention)[0] == f"{backbone.name}/transformer_layer_0/self_attention_layer"
    block = converted.get_layer(backbone.name).get_layer("transformer_layer_0")
    assert find_layers(block, MultiHeadSelfAttention) == {
        "self_attention_layer": block.layer._self_attention_layer
    }


def _source_attention(source, name, value):
    """A functional model around one attention layer of `source` built with `name=value`."""
    if source == "keras":
        layer_class = keras.layers.MultiHeadAttention
    else:
        layer_class = pytest.importorskip("keras_hub").layers.CachedMultiHeadAttention
    arguments = {"num_heads": 2, "key_dim": 4, "seed": 1, "name": "attention", name: value}
    layer = layer_class(**arguments)
    # Attention over two axes needs a 4-D input; every other case takes (length, dim).
    inputs = keras.Input((3, 2, 8) if name == "attention_axes" else (6, 8))
    return keras.Model(inputs, layer(inputs, inputs)), layer


def _same_outputs(source, converted, name):
    _assert_outputs_equal(converted(X), source(X))


def _same_config_entry(source, converted, name):
    expected = source.get_layer(index=1).get_config()[name]
    assert converted.get_layer(index=1).get_config()[name] == expected


def _same_attribute(source, converted, name):
    assert getattr(converted.get_layer(index=1), name) == getattr(source.get_layer(index=1), name)


def _same_losses(source, converted, name):
    """Weight and activity regularizers: `model.losses` after a call, term by term."""
    source(X), converted(X)
    assert len(converted.losses) == len(source.losses) > 0
    expected = sorted(float(to_numpy(loss)) for loss in source.losses)
    assert_allclose(sorted(float(to_numpy(loss)) for loss in converted.losses), expected, rtol=1e-5)


def _refused(source, converted, name):
    raise AssertionError(f"`{name}` must be refused")


# A value other than the default for every constructor argument of the layers
# `convert_attention` converts (`keras.layers.MultiHeadAttention` and KerasHub's
# `CachedMultiHeadAttention`, base `Layer` arguments included), and what shows that it
# is carried over; `_refused` ones must raise a `ValueError` that names them.
ARGUMENTS = {
    "num_heads": (3, _same_outputs),
    "key_dim": (2, _same_outputs),
    "value_dim": (5, _same_outputs),
    "output_shape": (4, _same_outputs),
    "use_bias": (False, _same_outputs),
    "flash_attention": (False, _same_outputs),
    "dropout": (0.25, _same_config_entry),
    "seed": (7, _same_config_entry),
    "kernel_initializer": ("ones", _same_config_entry),
    "bias_initializer": ("ones", _same_config_entry),
    "dtype": ("mixed_bfloat16", _same_config_entry),
    "name": ("renamed", _same_attribute),
    "trainable": (False, _same_attribute),
    "autocast": (False, _same_attribute),
    "kernel_regularizer": ("l2", _same_losses),
    "bias_regularizer": (keras.regularizers.L1(0.5), _same_losses),
    # Keras regularizes the four projections' outputs; the core's base argument, its output.
    "activity_regularizer": ("l2", _refused),
    "attention_axes": ((1, 2), _refused),
    "sliding_window": (2, _refused),
    "use_gate": (True, _refused),
    "kernel_constraint": ("non_neg", _refused),
    "bias_constraint": ("non_neg", _refused),
}


@pytest.mark.parametrize("source", ["keras", "keras_hub"])
def test_every_constructor_argument_of_the_converted_layers_is_in_the_table(source):
    """A new argument of Keras' or KerasHub's attention fails here until it is handled."""
    model, layer = _source_attention(source, "seed", 1)
    arguments = [
        parameter.name
        for layer_class in (type(layer), keras.layers.Layer)
        for parameter in inspect.signature(layer_class.__init__).parameters.values()
        if parameter.name != "self" and parameter.kind is not parameter.VAR_KEYWORD
    ]
    assert [name for name in arguments if name not in ARGUMENTS] == []


@pytest.mark.parametrize("source", ["keras", "keras_hub"])
@pytest.mark.parametrize("name", list(ARGUMENTS))
def test_conversion_carries_every_argument_or_refuses_it(source, name):
    value, carried = ARGUMENTS[name]
    if name == "value_dim" and keras.backend.backend() == "jax":
        pytest.skip("Keras' own attention cannot run value_dim != key_dim on JAX.")
    keras.utils.set_random_seed(0)
    model, layer = _source_attention(source, name, value)
    weights = [to_numpy(weight) for weight in model.weights]
    if carried is _refused:
        with pytest.raises(ValueError, match=f"'attention' cannot be converted.*has no `{name}`"):
            convert_attention(model)
        assert model.get_layer("attention") is layer
        for weight, before in zip(model.weights, weights, strict=True):
            assert_allclose(weight, before, rtol=0, atol=0)
        return
    converted = convert_attention(model)
    assert isinstance(converted.get_layer(index=1), MultiHeadSelfAttention)
    carried(model, converted, name)


def test_conversion_refuses_attention_subclasses_of_another_computation():
    """Whisper's key projection has no bias: its layer is not Keras' attention with a cache."""
    whisper = pytest.importorskip(
        "keras_hub.src.models.whisper.whisper_cached_multi_head_attention"
    )
    layer = whisper.WhisperCachedMultiHeadAttention(2, 4, name="whisper")
    layer(X, X)
    with pytest.raises(ValueError, match="'whisper' cannot be converted.*WhisperCachedMulti"):
        from_keras_attention(layer)


def test_conversion_refuses_an_option_it_does_not_know():
    """An argument Keras adds later, not at its default, is refused until the conversion
    handles it."""
    model, layer = _source_attention("keras", "seed", 1)
    config = layer.get_config()
    # The config of a later Keras release, with an option this module does not know.
    layer.get_config = lambda: {**config, "new_option": 3}
    with pytest.raises(ValueError, match="has no `new_option`. Received: new_option=3"):
        convert_attention(model)
