"""Models built from keras_attn layers."""

from keras_attn.models.bert_encoder import build_bert_encoder
from keras_attn.models.minilm_encoder import build_minilm_encoder
from keras_attn.models.vision_transformer import build_vision_transformer

__all__ = ["build_bert_encoder", "build_minilm_encoder", "build_vision_transformer"]
