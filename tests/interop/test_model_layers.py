"""`find_layers` lists nested layers in the order the model runs them;
`intercept_calls` and what is built on it reach inside them and always let go."""

import re

import keras
import numpy as np
import pytest

from keras_attn.analysis import transformer_block_sites
from keras_attn.interop import (
    find_attention_layers,
    find_feed_forward_layers,
    find_layers,
    gate_heads,
    intercept_calls,
    record_calls,
)
from keras_attn.layers import MultiHeadSelfAttention, TransformerBlock
from keras_attn.models import build_bert_encoder
from keras_attn.pruning import attention_layers
from keras_attn.testing.reference import self_attention_reference

pytestmark = pytest.mark.backend_agnostic

TEXT_INPUTS = ("token_ids", "padding_mask", "segment_ids")


def _blocks(count, prefix="block"):
    return [TransformerBlock(2, 8, name=f"{prefix}_{index}") for index in range(count)]


def _nested_encoder():
    """A classifier that calls a 3-layer BERT encoder as one layer."""
    encoder = build_bert_encoder(20, 3, 2, 4, 8, max_sequence_length=8, name="encoder")
    inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in TEXT_INPUTS}
    embedding = encoder(inputs)["sentence_embedding"]
    return encoder, keras.Model(inputs, keras.layers.Dense(2, name="logits")(embedding))


class _Stack(keras.layers.Layer):
    """A container layer: blocks in a list and one as an attribute."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.blocks = _blocks(2)
        self.last = TransformerBlock(2, 8, name="last")

    def call(self, x):
        for block in self.blocks:
            x = block(x)
        return self.last(x)


class _Subclassed(keras.Model):
    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.projection = keras.layers.Dense(4, name="projection")
        self.blocks = _blocks(3)

    def call(self, x):
        x = self.projection(x)
        for block in self.blocks:
            x = block(x)
        return x


def test_encoder_nested_in_a_classifier():
    encoder, classifier = _nested_encoder()
    found = attention_layers(classifier)
    assert list(found) == [f"encoder/layer_{index}/attention" for index in range(3)]
    assert list(found.values()) == [encoder.get_layer(f"layer_{i}").attention for i in range(3)]
    blocks = find_layers(classifier, TransformerBlock)
    assert list(blocks) == ["encoder/layer_0", "encoder/layer_1", "encoder/layer_2"]
    sites = transformer_block_sites(classifier)
    assert [site.name for site in sites] == list(blocks)
    assert [site.hidden for site in sites] == [block.mlp_hidden for block in blocks.values()]


def test_blocks_inside_a_container_layer():
    x = keras.Input((3, 4))
    model = keras.Model(x, _Stack(name="stack")(x))
    expected = ["stack/block_0/attention", "stack/block_1/attention", "stack/last/attention"]
    assert list(attention_layers(model)) == expected
    assert list(find_layers(model.get_layer("stack"), TransformerBlock)) == [
        "block_0",
        "block_1",
        "last",
    ]


def test_sequential_and_subclassed_models():
    sequential = keras.Sequential([keras.Input((3, 4)), *_blocks(3)])
    assert list(attention_layers(sequential)) == [f"block_{i}/attention" for i in range(3)]
    subclassed = _Subclassed()
    subclassed(np.zeros((1, 3, 2), "float32"))
    assert list(find_layers(subclassed, (keras.layers.Dense, MultiHeadSelfAttention))) == [
        "projection",
        *(
            f"block_{i}/{name}"
            for i in range(3)
            for name in ("attention", "mlp_hidden", "mlp_output")
        ),
    ]


def test_functional_graph_in_call_order_not_definition_order():
    defined_first = keras.layers.MultiHeadAttention(2, 2, name="defined_first")
    defined_second = keras.layers.MultiHeadAttention(2, 2, name="defined_second")
    x = keras.Input((3, 4))
    y = defined_second(x, x)
    inner = keras.Model(x, defined_first(y, y), name="inner")
    outer_input = keras.Input((3, 4))
    shared = keras.layers.Dense(4, name="shared")
    outer = keras.Model(outer_input, shared(inner(shared(outer_input))))
    assert list(attention_layers(inner)) == ["defined_second", "defined_first"]
    assert list(attention_layers(outer)) == ["inner/defined_second", "inner/defined_first"]
    # The shared layer is listed once, where the graph first calls it.
    assert list(find_layers(outer, (keras.layers.Dense, keras.layers.EinsumDense))) == [
        "shared",
        *(
            f"inner/{name}/{dense}"
            for name in ("defined_second", "defined_first")
            for dense in ("query", "key", "value", "attention_output")
        ),
    ]


def test_the_model_itself_and_bad_arguments():
    attention = MultiHeadSelfAttention(2, 2, name="attention")
    assert find_layers(attention, MultiHeadSelfAttention) == {"attention": attention}
    with pytest.raises(ValueError, match="Received: model='attention'"):
        find_layers("attention", MultiHeadSelfAttention)
    with pytest.raises(ValueError, match="Received: types='Dense'"):
        find_layers(attention, "Dense")
    with pytest.raises(ValueError, match=r"Received: types=\(\)"):
        find_layers(attention, ())


def test_two_layers_on_one_path_are_refused():
    class Twins(keras.layers.Layer):
        def __init__(self):
            super().__init__(name="twins")
            self.pair = [MultiHeadSelfAttention(2, 2, name="attention") for _ in range(2)]

    with pytest.raises(ValueError, match="path 'attention'.*Received: model='twins'"):
        attention_layers(Twins())


def test_keras_hub_backbones_in_model_order(keras_hub_backbone):
    backbones = {name: keras_hub_backbone(name) for name in ("bert", "gpt2", "vit")}
    attention = {name: list(find_attention_layers(model)) for name, model in backbones.items()}
    assert attention == {
        "bert": [f"transformer_layer_{i}/self_attention_layer" for i in range(2)],
        "gpt2": [f"transformer_layer_{i}/self_attention" for i in range(2)],
        "vit": [f"vit_encoder/transformer_block_{i}/mha" for i in (1, 2)],
    }
    names = {
        name: {
            path: (ffn.hidden.name, ffn.output.name, ffn.norm and ffn.norm.name)
            for path, ffn in find_feed_forward_layers(model).items()
        }
        for name, model in backbones.items()
    }
    dense = ("feedforward_intermediate_dense", "feedforward_output_dense")
    assert names == {
        "bert": {f"transformer_layer_{i}": (*dense, None) for i in range(2)},  # post-norm
        "gpt2": {f"transformer_layer_{i}": (*dense, "feedforward_layer_norm") for i in range(2)},
        "vit": {
            f"vit_encoder/transformer_block_{i}": ("dense_1", "dense_2", "ln_2") for i in (1, 2)
        },
    }


def test_feed_forward_layers_of_an_encoder_nested_in_a_classifier():
    encoder, classifier = _nested_encoder()
    found = find_feed_forward_layers(classifier)
    assert list(found) == [f"encoder/layer_{i}" for i in range(3)]
    for path, ffn in found.items():
        block = encoder.get_layer(path.split("/")[1])
        assert (ffn.hidden, ffn.output, ffn.norm) == (block.mlp_hidden, block.mlp_output, None)


def test_recorded_feed_forward_activations_of_gpt2(keras_hub_backbone):
    model = keras_hub_backbone("gpt2")
    ffn = find_feed_forward_layers(model)["transformer_layer_1"]
    inputs = {"token_ids": np.array([[1, 2, 3, 4]]), "padding_mask": np.ones((1, 4), "int32")}
    with record_calls([ffn.norm, ffn.hidden, ffn.output]) as records:
        model(inputs)
    assert [len(records[layer]) for layer in (ffn.norm, ffn.hidden, ffn.output)] == [1, 1, 1]
    (normed, hidden), (hidden_input, _) = records[ffn.hidden][0], records[ffn.output][0]
    kernel, bias = (keras.ops.convert_to_numpy(w) for w in ffn.hidden.weights)
    pre = keras.ops.convert_to_numpy(normed) @ kernel + bias  # (1, 4, 16)
    expected = 0.5 * pre * (1 + np.tanh(np.sqrt(2 / np.pi) * (pre + 0.044715 * pre**3)))
    np.testing.assert_allclose(keras.ops.convert_to_numpy(hidden), expected, atol=1e-5)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(hidden_input), keras.ops.convert_to_numpy(hidden)
    )
    assert all("call" not in vars(layer) for layer in (ffn.norm, ffn.hidden, ffn.output))


def _doubling(layer, call, inputs, *args, **kwargs):
    return call(inputs * 2.0, *args, **kwargs)


def test_intercept_calls_nests_and_always_lets_go():
    dense = keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)
    x = np.ones((1, 2), "float32")
    calls = []

    def counting(layer, call, inputs, *args, **kwargs):
        calls.append(layer.name)
        return call(inputs, *args, **kwargs)

    with intercept_calls([dense, dense], counting):
        with intercept_calls([dense], _doubling):
            assert float(keras.ops.convert_to_numpy(dense(x))[0, 0]) == 4.0
        assert float(keras.ops.convert_to_numpy(dense(x))[0, 0]) == 2.0
    assert calls == [dense.name, dense.name]  # the layer listed twice is intercepted once
    assert "call" not in vars(dense)
    with pytest.raises(RuntimeError, match="inside"), intercept_calls([dense], _doubling):
        raise RuntimeError("inside")
    assert "call" not in vars(dense)
    assert float(keras.ops.convert_to_numpy(dense(x))[0, 0]) == 2.0


def test_intercept_calls_rejects_bad_arguments_before_installing():
    dense = keras.layers.Dense(1)
    with pytest.raises(ValueError, match="Received: 'dense' in layers"):
        with intercept_calls([dense, "dense"], _doubling):
            pass
    with pytest.raises(ValueError, match="Received: interceptor=3"):
        with intercept_calls([dense], 3):
            pass
    assert "call" not in vars(dense)


@pytest.mark.parametrize("kind", ["core", "keras"])
def test_gate_heads_equals_a_head_mask(kind):
    keras.utils.set_random_seed(5)
    if kind == "core":
        layer = MultiHeadSelfAttention(3, 4, name="attention")
    else:
        layer = keras.layers.MultiHeadAttention(3, 4, name="attention")
    x = np.random.default_rng(0).normal(size=(2, 5, 8)).astype("float32")
    layer(x) if kind == "core" else layer(x, x)
    head_mask = np.array([1.0, 0.0, 0.5], "float32")
    with gate_heads({"attention": layer}, lambda name, ones: ones * head_mask[:, None]) as gates:
        gated = layer(x) if kind == "core" else layer(x, x)
    expected, _ = self_attention_reference(x, layer, head_mask=head_mask)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(gated), expected, atol=1e-5)
    assert [tuple(gate.shape) for gate in gates["attention"]] == [(2, 5, 3, 1)]
    assert "call" not in vars(layer.output_dense)


@pytest.mark.parametrize(
    "gate", [np.ones(3, "float32"), np.ones((2, 5, 2, 1), "float32")], ids=["heads", "batch"]
)
def test_a_gate_that_changes_the_heads_shape_is_refused(gate):
    """A gate of another head count, or one that broadcasts the batch of 1 to 2."""
    layer = MultiHeadSelfAttention(2, 4, name="attention")
    x = np.ones((1, 5, 8), "float32")
    expected = keras.ops.convert_to_numpy(layer(x))
    message = (
        re.escape("`make_gate` must return a gate that broadcasts")
        + r".*layer 'attention', of shape \(1, 5, 2, 4\).*"
        + re.escape(f"Received: gate.shape={gate.shape}")
    )
    with pytest.raises(ValueError, match=message):
        with gate_heads({"attention": layer}, lambda name, ones: gate):
            layer(x)
    assert "call" not in vars(layer.output_dense)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(layer(x)), expected)


def test_intercept_calls_restores_the_layer_whatever_order_the_blocks_end():
    dense = keras.layers.Dense(1, kernel_initializer="ones", use_bias=False)
    x = np.ones((1, 2), "float32")

    def value():
        return float(keras.ops.convert_to_numpy(dense(x))[0, 0])

    def plus_one(layer, call, inputs, *args, **kwargs):
        return call(inputs, *args, **kwargs) + 1.0

    for own_call in (None, dense.call):  # the class's `call`, then one set on the instance
        if own_call is not None:
            dense.call = own_call
        outer, inner = intercept_calls([dense], _doubling), intercept_calls([dense], plus_one)
        outer.__enter__()
        inner.__enter__()
        assert value() == 5.0  # (1 + 1) * 2 + 1: the inner block wraps the outer one
        outer.__exit__(None, None, None)  # the outer block ends first
        assert value() == 3.0  # the inner interceptor alone
        inner.__exit__(None, None, None)
        assert value() == 2.0
        assert vars(dense).get("call") is own_call


def _gated_classifier(jit_compile):
    """A classifier around a nested encoder with a Keras attention layer, compiled."""
    keras.utils.set_random_seed(3)
    inputs = keras.Input((4, 8))
    attention = keras.layers.MultiHeadAttention(2, 4, name="attention")(inputs, inputs)
    encoder = keras.Model(inputs, attention + inputs, name="encoder")
    outer = keras.Input((4, 8))
    classifier = keras.Model(outer, keras.layers.Dense(3, name="logits")(encoder(outer)))
    classifier.compile(keras.optimizers.SGD(0.0), loss="mse", jit_compile=jit_compile)
    return encoder, classifier


def _compiled_runs(model, x, y):
    """`predict` outputs, the `evaluate` loss and the loss of a `fit` step (learning rate 0)."""
    history = model.fit(x, y, batch_size=len(x), epochs=1, verbose=0)
    return model.predict(x, verbose=0), model.evaluate(x, y, verbose=0), history.history["loss"][0]


@pytest.mark.parametrize("jit_compile", [True, "auto"])
def test_gate_heads_hold_in_predict_fit_and_evaluate_of_the_outer_model_and_not_after(jit_compile):
    """`predict` and `evaluate` are traced before the block, `fit` first inside it."""
    on_torch = keras.backend.backend() == "torch"
    if on_torch and jit_compile is True:
        pytest.skip("Torch models compile with jit_compile=False.")
    encoder, classifier = _gated_classifier(jit_compile)
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(2, 4, 8)).astype("float32"), rng.normal(size=(2, 4, 3))
    ungated = keras.ops.convert_to_numpy(classifier(x))
    ungated_loss = float(np.mean((ungated - y) ** 2))
    np.testing.assert_allclose(classifier.predict(x, verbose=0), ungated, atol=1e-5)
    classifier.evaluate(x, y, verbose=0)
    head_mask = np.array([0.0, 1.0], "float32")
    layers = find_attention_layers(encoder)
    with gate_heads(layers, lambda name, ones: ones * head_mask[:, None]):
        gated = keras.ops.convert_to_numpy(classifier(x))
        outputs, loss, fit_loss = _compiled_runs(classifier, x, y)
    assert not np.allclose(gated, ungated, atol=1e-3)
    np.testing.assert_allclose(outputs, gated, atol=1e-5)
    np.testing.assert_allclose([loss, fit_loss], [np.mean((gated - y) ** 2)] * 2, rtol=1e-5)
    outputs, loss, fit_loss = _compiled_runs(classifier, x, y)
    np.testing.assert_allclose(outputs, ungated, atol=1e-5)
    np.testing.assert_allclose([loss, fit_loss], [ungated_loss] * 2, rtol=1e-5)
    np.testing.assert_allclose(
        encoder.predict(x, verbose=0), keras.ops.convert_to_numpy(encoder(x))
    )


def test_gate_heads_hold_in_predict_of_a_keras_hub_backbone(keras_hub_backbone):
    backbone = keras_hub_backbone("bert")
    inputs = {
        "token_ids": np.array([[1, 2, 3, 4, 5]]),
        "segment_ids": np.zeros((1, 5), "int32"),
        "padding_mask": np.ones((1, 5), "int32"),
    }
    backbone.compile(jit_compile=keras.backend.backend() != "torch")
    ungated = backbone.predict(inputs, verbose=0)["sequence_output"]
    with gate_heads(find_attention_layers(backbone), lambda name, ones: ones * 0.0):
        gated = keras.ops.convert_to_numpy(backbone(inputs)["sequence_output"])
        np.testing.assert_allclose(
            backbone.predict(inputs, verbose=0)["sequence_output"], gated, atol=1e-5
        )
    assert not np.allclose(gated, ungated, atol=1e-3)
    np.testing.assert_allclose(
        backbone.predict(inputs, verbose=0)["sequence_output"], ungated, atol=1e-5
    )


def test_record_calls_refuse_a_compiled_predict_and_leave_the_model_as_it_was():
    encoder, classifier = _gated_classifier(jit_compile=keras.backend.backend() != "torch")
    x = np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")
    expected = classifier.predict(x, verbose=0)
    attention = encoder.get_layer("attention")
    if keras.backend.backend() == "torch":  # the torch trainer calls the model eagerly
        with record_calls([attention]) as records:
            classifier.predict(x, verbose=0)
        assert len(records[attention]) == 1
    else:
        with pytest.raises(ValueError, match=r"traced .* Received: traced outputs \{'attention'"):
            with record_calls([attention]):
                classifier.predict(x, verbose=0)
    np.testing.assert_allclose(classifier.predict(x, verbose=0), expected, atol=1e-6)
    classifier.compile(loss="mse", run_eagerly=True)
    with record_calls([attention]) as records:
        classifier.predict(x, verbose=0)
    [(inputs, outputs)] = records[attention]
    np.testing.assert_allclose(keras.ops.convert_to_numpy(inputs), x)
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(outputs), keras.ops.convert_to_numpy(attention(x, x)), atol=1e-6
    )


def test_blocks_for_direct_calls_leave_compiled_functions_alone():
    """`compiled_calls=False` saves looking for the models: direct calls are gated all the same."""
    encoder, classifier = _gated_classifier(jit_compile=keras.backend.backend() != "torch")
    x = np.random.default_rng(0).normal(size=(2, 4, 8)).astype("float32")
    classifier.predict(x, verbose=0)
    function = classifier.predict_function
    layers = find_attention_layers(encoder)
    with gate_heads(layers, lambda name, ones: ones * 0.0, compiled_calls=False):
        gated = keras.ops.convert_to_numpy(classifier(x))
        assert classifier.predict_function is function
    assert classifier.predict_function is function
    assert not np.allclose(gated, keras.ops.convert_to_numpy(classifier(x)), atol=1e-3)
    with pytest.raises(ValueError, match="Received: compiled_calls='no'"):
        with intercept_calls(layers.values(), _doubling, compiled_calls="no"):
            pass
    assert "call" not in vars(layers["attention"].output_dense)
