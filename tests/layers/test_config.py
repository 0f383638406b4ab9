"""The config entries that the layers write from their argument names."""

import keras
import pytest

from keras_attn.layers import BSARecBlock, MultiHeadSelfAttention, TransformerBlock
from keras_attn.layers._config import argument_config
from keras_attn.layers.log_sparse_pattern import LogSparsePattern

pytestmark = pytest.mark.backend_agnostic


def test_entries_are_serialized_as_their_keras_kind():
    block = TransformerBlock(
        num_heads=2,
        intermediate_dim=8,
        activation="relu",
        kernel_initializer=keras.initializers.HeNormal(seed=3),
        attention_kwargs={"attention_pattern": LogSparsePattern("pure"), "use_bias": False},
    )
    names = ("num_heads", "activation", "kernel_initializer", "attention_kwargs")
    assert argument_config(block, names) == {
        "num_heads": 2,
        "activation": "relu",
        "kernel_initializer": keras.initializers.serialize(block.kernel_initializer),
        "attention_kwargs": {
            "attention_pattern": keras.saving.serialize_keras_object(LogSparsePattern("pure")),
            "use_bias": False,
        },
    }


def test_entries_keep_the_order_of_the_names():
    layer = MultiHeadSelfAttention(2, 4, kernel_regularizer="l2")
    config = argument_config(layer, ("seed", "kernel_regularizer", "key_dim"))
    assert list(config) == ["seed", "kernel_regularizer", "key_dim"]
    assert config["kernel_regularizer"] == keras.regularizers.serialize(layer.kernel_regularizer)


def test_layer_config_rebuilds_the_same_activation():
    block = BSARecBlock(num_heads=2, activation="gelu")
    config = block.get_config()
    assert config["activation"] == "gelu"
    assert BSARecBlock.from_config(config).get_config() == config
