"""Initializers of keras_attn.

The weight statistics that motivate mimetic initialization are measured by
`keras_attn.analysis` (`query_key_products`, `value_output_products`,
`diagonal_statistics`).
"""

from keras_attn.initializers.apply_mimetic_init import apply_mimetic_init
from keras_attn.initializers.mimetic_initializer import MimeticInitializer

__all__ = ["MimeticInitializer", "apply_mimetic_init"]
