"""Test utilities shared by every keras_attn layer test."""

from keras_attn.testing.compilation import quick_jit_compile
from keras_attn.testing.layer_checks import LayerChecks

__all__ = ["LayerChecks", "quick_jit_compile"]
