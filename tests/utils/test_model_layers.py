"""`find_layers` lists nested layers in the order the model runs them."""

import keras
import numpy as np
import pytest

from keras_attn.analysis import transformer_block_sites
from keras_attn.layers import MultiHeadSelfAttention, TransformerBlock
from keras_attn.models import build_bert_encoder
from keras_attn.pruning import attention_layers
from keras_attn.utils import find_layers

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
