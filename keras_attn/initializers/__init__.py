"""Initializers of keras_attn."""

from keras_attn.initializers.apply_mimetic_init import apply_mimetic_init, attention_layers
from keras_attn.initializers.attention_products import (
    diagonal_statistics,
    query_key_products,
    value_output_products,
)
from keras_attn.initializers.mimetic_initializer import MimeticInitializer

__all__ = [
    "MimeticInitializer",
    "apply_mimetic_init",
    "attention_layers",
    "diagonal_statistics",
    "query_key_products",
    "value_output_products",
]
