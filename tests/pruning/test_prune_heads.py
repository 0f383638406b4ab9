import os
import pathlib
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.interop import ConvertedAttentionBlock, convert_attention, gate_heads
from keras_attn.layers import ConvolutionalSelfAttention, MultiHeadSelfAttention, TransformerBlock
from keras_attn.models import build_bert_encoder, build_vision_transformer
from keras_attn.pruning import attention_layers, prune_heads
from keras_attn.testing.arrays import assert_allclose, assert_array_equal, to_numpy

HEADS = {"layer_0/attention": [0, 2], "layer_1/attention": [1, 2, 3]}
ROWS = {"layer_0/attention": 0, "layer_1/attention": 1}


def _encoder(**kwargs):
    keras.utils.set_random_seed(0)
    return build_bert_encoder(
        50, num_layers=2, num_heads=4, hidden_dim=16, intermediate_dim=32, **kwargs
    )


def _inputs(head_mask):
    rng = np.random.default_rng(0)
    padding_mask = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], "int32")
    return {
        "token_ids": rng.integers(1, 50, (2, 6)).astype("int32") * padding_mask,
        "padding_mask": padding_mask,
        "segment_ids": np.zeros((2, 6), "int32"),
        "head_mask": np.broadcast_to(head_mask, (2, *head_mask.shape)).astype("float32"),
    }


def _mask(heads, shape):
    mask = np.ones(shape, "float32")
    for name, removed in heads.items():
        mask[ROWS[name], removed] = 0.0
    return mask


def test_pruned_encoder_blocks_equal_the_masked_model(tmp_path):
    """The attention layers nested in the BERT encoder's blocks lose their heads."""
    model = _encoder(output_hidden_states=True, head_mask=True)
    pruned = prune_heads(model, HEADS)
    assert list(attention_layers(pruned)) == list(attention_layers(model))
    assert [pruned.get_layer(f"layer_{i}").attention.num_heads for i in range(2)] == [2, 1]
    assert model.get_layer("layer_0").attention.num_heads == 4
    attention = pruned.get_layer("layer_1").attention
    shapes = [
        tuple(dense.kernel.shape) for dense in (attention.query_dense, attention.output_dense)
    ]
    assert shapes == [(16, 1, 4), (1, 4, 16)]
    assert tuple(attention.value_dense.bias.shape) == (1, 4)
    # Five heads of 4 dimensions go: query, key, value and output kernels and q/k/v biases.
    assert pruned.count_params() == model.count_params() - 5 * (4 * 16 * 4 + 3 * 4)
    masked = _inputs(_mask(HEADS, (2, 4)))
    expected = model(masked)
    outputs = pruned(masked)
    np.testing.assert_allclose(outputs["hidden_states"], expected["hidden_states"], atol=1e-5)
    # The head mask still applies to the kept heads.
    partly = _mask({"layer_0/attention": [0, 1, 2]}, (2, 4))
    partly[1, 1:] = 0.0
    np.testing.assert_allclose(
        pruned(_inputs(partly))["sequence_output"],
        model(_inputs(partly))["sequence_output"],
        atol=1e-5,
    )
    pruned.save(tmp_path / "pruned.keras")
    reloaded = keras.saving.load_model(tmp_path / "pruned.keras")
    np.testing.assert_allclose(reloaded(masked)["sequence_output"], outputs["sequence_output"])
    pruned.export(tmp_path / "saved_model", format="tf_saved_model")
    restored = tf.saved_model.load(str(tmp_path / "saved_model"))
    served = restored.serve({name: tf.constant(value) for name, value in masked.items()})
    np.testing.assert_allclose(
        served["sentence_embedding"], expected["sentence_embedding"], atol=1e-5
    )
    compiled = tf.function(pruned, jit_compile=True)
    np.testing.assert_allclose(
        compiled(masked)["sentence_embedding"], expected["sentence_embedding"], atol=1e-5
    )


def test_pruned_keras_attention_equals_zeroed_heads():
    keras.utils.set_random_seed(1)
    x = keras.Input((5, 8))
    h = keras.layers.MultiHeadAttention(3, 4, name="self")(x, x)
    h = keras.layers.MultiHeadAttention(3, 4, value_dim=2, use_bias=False, name="cross")(h, x)
    model = keras.Model(x, keras.layers.Dense(2)(h))
    pruned = prune_heads(model, {"self": [1], "cross": [0, 2]})
    assert isinstance(pruned.get_layer("self"), keras.layers.MultiHeadAttention)
    assert pruned.get_layer("cross").num_heads == 1
    for name, removed in (("self", [1]), ("cross", [0, 2])):
        kernel = model.get_layer(name).output_dense.kernel
        zeroed = kernel.numpy()
        zeroed[removed] = 0.0  # a mask of 0 on a head removes its rows of the output kernel
        kernel.assign(zeroed)
    inputs = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    np.testing.assert_allclose(pruned(inputs), model(inputs), atol=1e-5)


def test_pruned_model_with_core_attention_scores_output():
    x = keras.Input((4, 8))
    output, scores = MultiHeadSelfAttention(4, 2, name="attention")(x, return_attention_scores=True)
    pruned = prune_heads(keras.Model(x, [output, scores]), {"attention": [3]})
    assert pruned(np.zeros((1, 4, 8)))[1].shape == (1, 3, 4, 4)


def _zero_heads(attention, removed):
    """Zeroes the output-kernel rows of `removed` heads: a head mask of 0 on them."""
    kernel = attention.output_dense.kernel
    zeroed = keras.ops.convert_to_numpy(kernel).copy()
    zeroed[removed] = 0.0
    kernel.assign(zeroed)


def test_pruned_vision_transformer_equals_zeroed_heads():
    keras.utils.set_random_seed(2)
    model = build_vision_transformer(
        (8, 8), 3, patch_size=4, hidden_dim=12, num_layers=2, num_heads=3
    )
    heads = {"block_0/attention": [1], "block_1/attention": [0, 2]}
    pruned = prune_heads(model, heads)
    assert [pruned.get_layer(f"block_{i}").num_heads for i in range(2)] == [2, 1]
    assert tuple(pruned.get_layer("block_1").attention.key_dense.kernel.shape) == (12, 1, 4)
    for name, removed in heads.items():
        _zero_heads(attention_layers(model)[name], removed)
    images = np.random.default_rng(3).normal(size=(2, 8, 8)).astype("float32")
    np.testing.assert_allclose(pruned(images), model(images), atol=1e-5)


def test_pruned_t2t_vit_blocks_equal_zeroed_heads_and_token_layers_are_refused(small_t2t_vit):
    keras.utils.set_random_seed(4)
    model = small_t2t_vit(num_layers=2, num_heads=4, token_layer="transformer")
    pruned = prune_heads(model, {"block_1/attention": [0, 3]})
    attention = pruned.get_layer("block_1").attention
    assert attention.num_heads == 2 and attention.query_dense.bias is None
    _zero_heads(model.get_layer("block_1").attention, [0, 3])
    images = np.random.default_rng(5).normal(size=(2, 12, 12)).astype("float32")
    np.testing.assert_allclose(pruned(images), model(images), atol=1e-5)
    token_attention = next(name for name in attention_layers(model) if "token_layer" in name)
    with pytest.raises(
        ValueError, match="cannot rebuild .*token_layer_0/attention.*TokenTransformer"
    ):
        prune_heads(model, {token_attention: [0]})


def test_pruned_block_with_given_convolutional_attention_equals_masked_block():
    """A block's given attention is rebuilt from its config; its conv kernels lose heads."""
    keras.utils.set_random_seed(6)
    x = keras.Input((6, 8))
    head_mask = keras.Input((4,))
    attention = ConvolutionalSelfAttention(4, 2, kernel_size=3, name="attention")
    block = TransformerBlock(intermediate_dim=16, attention=attention, name="block")
    model = keras.Model([x, head_mask], block(x, head_mask=head_mask))
    pruned = prune_heads(model, {"block/attention": [1, 2]})
    kernel = pruned.get_layer("block").attention.query_dense.kernel
    assert isinstance(pruned.get_layer("block").attention, ConvolutionalSelfAttention)
    assert tuple(kernel.shape) == (3, 8, 2, 2)
    inputs = np.random.default_rng(7).normal(size=(2, 6, 8)).astype("float32")
    mask = np.array([[1.0, 0.0, 0.0, 1.0], [0.5, 0.0, 0.0, 2.0]], "float32")
    np.testing.assert_allclose(pruned([inputs, mask]), model([inputs, mask]), atol=1e-5)


@pytest.mark.parametrize(
    "heads, message",
    [
        ({"layer_9/attention": [0]}, "Received: heads with 'layer_9/attention'"),
        ({"layer_0": [0]}, "Received: heads with 'layer_0'"),
        ({"layer_0/attention": [4]}, r"Received: heads\['layer_0/attention'\]=\[4\]"),
        ({"layer_0/attention": [0, 1, 2, 3]}, "removes all 4 heads"),
    ],
)
def test_bad_heads(heads, message):
    with pytest.raises(ValueError, match=message):
        prune_heads(_encoder(), heads)


def test_subclassed_model_is_refused():
    class Tiny(keras.Model):
        def call(self, x):
            return x

    with pytest.raises(ValueError, match="Received: model=Tiny"):
        prune_heads(Tiny(), {})


@pytest.mark.backend_agnostic
def test_encoder_nested_in_a_classifier_is_pruned_inside(tmp_path):
    encoder = _encoder(head_mask=True)
    inputs = {
        name: keras.Input(tensor.shape[1:], dtype=tensor.dtype, name=name)
        for name, tensor in encoder.input.items()
    }
    logits = keras.layers.Dense(3, name="logits")(encoder(inputs)["sentence_embedding"])
    classifier = keras.Model(inputs, logits)
    heads = {f"{encoder.name}/{name}": removed for name, removed in HEADS.items()}
    pruned = prune_heads(classifier, heads)
    nested = pruned.get_layer(encoder.name)
    assert [nested.get_layer(f"layer_{i}").attention.num_heads for i in range(2)] == [2, 1]
    assert list(attention_layers(pruned)) == list(attention_layers(classifier))
    masked = _inputs(_mask(HEADS, (2, 4)))
    expected = keras.ops.convert_to_numpy(classifier(masked))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pruned(masked)), expected, atol=1e-5)
    pruned.predict(masked, verbose=0)  # compiled: on JAX it donates the weights' buffers
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(classifier(masked)), expected)
    pruned.save(tmp_path / "pruned.keras")
    reloaded = keras.saving.load_model(tmp_path / "pruned.keras")
    np.testing.assert_allclose(keras.ops.convert_to_numpy(reloaded(masked)), expected, atol=1e-5)


def _keras_hub_model(keras_hub_backbone, name):
    """A tiny KerasHub model (two blocks of 4 heads of width 2) and a batch of 2 for it."""
    keras.utils.set_random_seed(8)
    rng = np.random.default_rng(8)
    if name == "vit":
        return keras_hub_backbone("vit", num_heads=4), rng.normal(size=(2, 8, 8, 3)).astype("f4")
    padding = np.array([[1, 1, 1, 1, 1, 1], [1, 1, 1, 1, 0, 0]], "int32")
    inputs = {"token_ids": rng.integers(1, 30, (2, 6)).astype("int32"), "padding_mask": padding}
    if name == "gpt2":
        return keras_hub_backbone("gpt2", num_heads=4), inputs
    inputs["segment_ids"] = np.zeros((2, 6), "int32")
    backbone = keras_hub_backbone("bert", num_heads=4)
    if name == "bert":
        return backbone, inputs
    import keras_hub

    classifier = keras_hub.models.BertTextClassifier(backbone, num_classes=2, preprocessor=None)
    logits = classifier.get_layer("logits").kernel
    logits.assign(logits * 1000.0)  # logits of about 1 rather than 1e-3, for the tolerances
    return classifier, inputs


def _gated_outputs(model, removed, inputs):
    """`model`'s outputs with the `removed` heads masked to zero (numpy)."""
    layers = attention_layers(model)
    masks = {
        name: np.isin(np.arange(layer.num_heads), removed.get(name, []), invert=True)
        for name, layer in layers.items()
    }
    with gate_heads(layers, lambda name, ones: ones * masks[name][:, None].astype("float32")):
        return keras.tree.map_structure(to_numpy, model(inputs))


def _assert_outputs_close(actual, expected, atol=1e-5):
    for a, b in zip(keras.tree.flatten(actual), keras.tree.flatten(expected), strict=True):
        assert_allclose(a, b, atol=atol, rtol=0)


KERAS_HUB_MODELS = ["bert", "gpt2", "vit", "bert_classifier"]
# Each removed head of width 2 in a block of width 8: query, key and value kernels (8, 2) and
# biases (2,), and the output kernel's (2, 8) rows.
PARAMETERS_PER_HEAD = 3 * (8 * 2 + 2) + 2 * 8


def _two_layers_pruned(model):
    """Heads 0, 2 of the first attention layer and 1, 2, 3 of the second: 2 and 1 heads left."""
    first, second = attention_layers(model)
    return {first: [0, 2], second: [1, 2, 3]}


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("name", KERAS_HUB_MODELS)
def test_keras_hub_model_pruned_equals_its_masked_heads(keras_hub_backbone, name, tmp_path):
    """BERT, GPT-2 and ViT backbones and a BERT classifier lose heads in one call, and reload."""
    model, inputs = _keras_hub_model(keras_hub_backbone, name)
    weights = [to_numpy(weight) for weight in model.weights]
    heads = _two_layers_pruned(model)
    pruned = prune_heads(model, heads)
    assert [layer.num_heads for layer in attention_layers(pruned).values()] == [2, 1]
    assert pruned.count_params() == model.count_params() - 5 * PARAMETERS_PER_HEAD
    expected = _gated_outputs(model, heads, inputs)
    _assert_outputs_close(pruned(inputs), expected)
    pruned.save(tmp_path / "pruned.keras")
    reloaded = keras.saving.load_model(tmp_path / "pruned.keras")
    assert [layer.num_heads for layer in attention_layers(reloaded).values()] == [2, 1]
    _assert_outputs_close(reloaded(inputs), expected)
    unmasked = keras.tree.flatten(keras.tree.map_structure(to_numpy, model(inputs)))
    assert not np.allclose(unmasked[-1], keras.tree.flatten(expected)[-1], atol=1e-4)
    # The user's model is left as it was.
    assert [layer.num_heads for layer in attention_layers(model).values()] == [4, 4]
    for weight, before in zip(model.weights, weights, strict=True):
        assert_array_equal(weight, before)


@pytest.mark.slow  # mostly the fresh process's imports of Keras, its backend and KerasHub
@pytest.mark.backend_agnostic
def test_pruned_keras_hub_models_reload_in_a_fresh_process(keras_hub_backbone, tmp_path):
    """Only `import keras_attn` before loading: the classes that the files name are found."""
    expected = {}
    for name in KERAS_HUB_MODELS:
        model, inputs = _keras_hub_model(keras_hub_backbone, name)
        pruned = prune_heads(model, _two_layers_pruned(model))
        pruned.save(tmp_path / f"{name}.keras")
        np.save(tmp_path / f"{name}_inputs.npy", inputs, allow_pickle=True)
        expected[name] = keras.tree.map_structure(to_numpy, pruned(inputs))
    script = (
        "import sys, keras, numpy as np, keras_attn\n"
        "from keras_attn.pruning import attention_layers\n"
        "for name in sys.argv[2:]:\n"
        "    path = f'{sys.argv[1]}/{name}'\n"
        "    model = keras.saving.load_model(path + '.keras')\n"
        "    inputs = np.load(path + '_inputs.npy', allow_pickle=True)[()]\n"
        "    outputs = keras.tree.map_structure(keras.ops.convert_to_numpy, model(inputs))\n"
        "    np.save(path + '_outputs.npy', outputs, allow_pickle=True)\n"
        "    print(name, [layer.num_heads for layer in attention_layers(model).values()])\n"
    )
    environment = {**os.environ, "KERAS_BACKEND": keras.backend.backend()}
    run = subprocess.run(
        [sys.executable, "-c", script, str(tmp_path), *KERAS_HUB_MODELS],
        capture_output=True,
        text=True,
        env=environment,
        cwd=pathlib.Path(__file__).resolve().parents[2],
        check=False,
    )
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:-1] == [f"{name} [2, 1]" for name in KERAS_HUB_MODELS]
    for name, outputs in expected.items():
        reloaded = np.load(tmp_path / f"{name}_outputs.npy", allow_pickle=True)[()]
        _assert_outputs_close(reloaded, outputs, atol=1e-6)


@pytest.mark.backend_agnostic
def test_pruned_keras_hub_classifier_predicts_compiled_and_fits(keras_hub_backbone):
    classifier, inputs = _keras_hub_model(keras_hub_backbone, "bert_classifier")
    heads = _two_layers_pruned(classifier)
    pruned = prune_heads(classifier, heads)
    pruned.compile(
        "sgd",
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=keras.backend.backend() != "torch",
    )
    expected = _gated_outputs(classifier, heads, inputs)
    _assert_outputs_close(pruned.predict(inputs, batch_size=2, verbose=0), expected)
    history = pruned.fit(inputs, np.array([0, 1]), batch_size=2, verbose=0)
    assert np.isfinite(history.history["loss"]).all()
    assert not np.allclose(pruned.predict(inputs, verbose=0), expected, atol=1e-6)


@pytest.mark.backend_agnostic
def test_a_refused_prune_of_a_keras_hub_backbone_changes_nothing(keras_hub_backbone):
    model, _ = _keras_hub_model(keras_hub_backbone, "vit")
    first, second = attention_layers(model)
    weights = [to_numpy(weight) for weight in model.weights]
    with pytest.raises(ValueError, match=f"Received: heads\\[{first!r}\\] removes all 4 heads"):
        prune_heads(model, {second: [0], first: [0, 1, 2, 3]})
    with pytest.raises(ValueError, match=r"Received: heads with 'vit_encoder'"):
        prune_heads(model, {"vit_encoder": [0]})
    assert [layer.num_heads for layer in attention_layers(model).values()] == [4, 4]
    for weight, before in zip(model.weights, weights, strict=True):
        assert_array_equal(weight, before)


@pytest.mark.backend_agnostic
def test_a_converted_keras_hub_backbone_is_pruned_inside_its_converted_blocks(keras_hub_backbone):
    model, inputs = _keras_hub_model(keras_hub_backbone, "gpt2")
    converted = convert_attention(model)
    heads = _two_layers_pruned(converted)
    pruned = prune_heads(converted, heads)
    for index, count in enumerate([2, 1]):
        block = pruned.get_layer(f"transformer_layer_{index}")
        assert isinstance(block, ConvertedAttentionBlock)
        assert block.layer._self_attention_layer.num_heads == count
    _assert_outputs_close(pruned(inputs), _gated_outputs(converted, heads, inputs))


@pytest.mark.backend_agnostic
def test_sequential_blocks_nested_in_a_functional_model_are_pruned():
    keras.utils.set_random_seed(13)
    blocks = [TransformerBlock(4, 16, name=f"block_{i}") for i in range(2)]
    stack = keras.Sequential([keras.Input((5, 8)), *blocks], name="stack")
    x = keras.Input((5, 8))
    model = keras.Model(x, keras.layers.Dense(2, name="logits")(stack(x)))
    pruned = prune_heads(model, {"stack/block_1/attention": [0, 3]})
    nested = pruned.get_layer("stack")
    assert isinstance(nested, keras.Sequential)
    assert [nested.get_layer(f"block_{i}").attention.num_heads for i in range(2)] == [4, 2]
    inputs = np.random.default_rng(14).normal(size=(2, 5, 8)).astype("float32")
    mask = np.array([0.0, 1.0, 1.0, 0.0], "float32")
    with gate_heads({"block_1": blocks[1].attention}, lambda name, ones: ones * mask[:, None]):
        expected = keras.ops.convert_to_numpy(model(inputs))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(pruned(inputs)), expected, atol=1e-5)
    alone = prune_heads(stack, {"block_0/attention": [1]})
    assert isinstance(alone, keras.Sequential)
    assert alone.get_layer("block_0").attention.num_heads == 3
