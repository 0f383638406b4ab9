"""Pretrained models whose weights ship offline in pip packages.

all-MiniLM-L6-v2 lives in one module: its weight reader
(`load_minilm_weights`, `MiniLMWeights`) and its Keras encoder
(`build_minilm_encoder`).
"""

from keras_attn.pretrained.minilm import MiniLMWeights, build_minilm_encoder, load_minilm_weights

__all__ = ["MiniLMWeights", "build_minilm_encoder", "load_minilm_weights"]
