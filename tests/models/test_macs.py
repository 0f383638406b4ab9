"""The MAC counter against hand counts; the paper models' counts are in test_t2t_vit.py."""

import keras
import pytest

from keras_attn.layers import MultiHeadSelfAttention, TransformerBlock
from keras_attn.models import build_vision_transformer, count_macs, layer_macs, register_macs


def test_mac_counter_matches_hand_count_for_a_vit():
    model = build_vision_transformer(
        (28, 28), 10, patch_size=7, hidden_dim=32, num_layers=1, num_heads=4
    )
    total, by_layer = count_macs(model, by_layer=True)
    tokens = 17
    assert by_layer["patch_embedding"] == 16 * 49 * 32
    attention = tokens * 32 * 96 + tokens * 32 * 32 + 4 * tokens * tokens * 16
    assert by_layer["block_0"] == attention + tokens * 2 * 32 * 64
    assert by_layer["head"] == 32 * 10
    assert total == sum(by_layer.values())


def test_mac_counter_rejects_unknown_layers_with_weights():
    inputs = keras.Input((8, 8, 1))
    model = keras.Model(inputs, keras.layers.Conv2D(2, 3)(inputs))
    with pytest.raises(ValueError, match="Received: layer="):
        count_macs(model)


def test_layer_macs_of_the_core_and_the_block_by_hand():
    attention = MultiHeadSelfAttention(2, 4)
    attention.build((1, 5, 6))
    # q, k, v: 5 * 6 * 2 * (4 + 4 + 4); output: 5 * 2 * 4 * 6; logits and sums: 2 * 5 * 5 * 8.
    expected = 5 * 6 * 2 * 12 + 5 * 2 * 4 * 6 + 2 * 5 * 5 * 8
    assert layer_macs(attention, (1, 5, 6)) == expected
    block = TransformerBlock(2, 16)  # heads of size 6 / 2 = 3
    block.build((1, 5, 6))
    block_attention = 5 * 6 * 2 * 9 + 5 * 2 * 3 * 6 + 2 * 5 * 5 * 6
    assert layer_macs(block, (1, 5, 6)) == block_attention + 5 * 2 * 6 * 16  # MLP 6 -> 16 -> 6


def test_a_registered_counter_counts_a_new_layer():
    class Scale(keras.layers.Layer):
        def build(self, input_shape):
            self.w = self.add_weight(shape=(input_shape[-1],))

        def call(self, x):
            return x * self.w

    @register_macs(Scale)
    def _scale(layer, input_shape):
        return input_shape[1] * input_shape[2]

    inputs = keras.Input((3, 4))
    model = keras.Model(inputs, Scale(name="scale")(inputs))
    assert count_macs(model, by_layer=True) == (12, {"scale": 12})
