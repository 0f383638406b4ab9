"""Models built from keras_attn layers."""

from keras_attn.models.bit_string_classifier import build_bit_string_classifier
from keras_attn.models.exact_formal_languages import (
    build_exact_first_transformer,
    build_exact_parity_transformer,
)
from keras_attn.models.vision_transformer import build_vision_transformer

__all__ = [
    "build_bit_string_classifier",
    "build_exact_first_transformer",
    "build_exact_parity_transformer",
    "build_vision_transformer",
]
