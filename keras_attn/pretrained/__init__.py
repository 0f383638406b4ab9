"""Readers of pretrained weights that ship offline in pip packages."""

from keras_attn.pretrained.minilm import MiniLMWeights, load_minilm_weights

__all__ = ["MiniLMWeights", "load_minilm_weights"]
