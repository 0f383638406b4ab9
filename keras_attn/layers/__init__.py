"""Attention layers of keras_attn, built on `MultiHeadSelfAttention`."""

from keras_attn.layers.attention_pattern import AttentionPattern, CausalWindowPattern
from keras_attn.layers.bit_string_features import BitStringFeatures
from keras_attn.layers.class_token import ClassToken
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.layers.patch_embedding import PatchEmbedding
from keras_attn.layers.position_embedding import PositionEmbedding
from keras_attn.layers.sin_cos_position_embedding import SinCosPositionEmbedding2D
from keras_attn.layers.transformer_block import TransformerBlock

__all__ = [
    "AttentionPattern",
    "BitStringFeatures",
    "CausalWindowPattern",
    "ClassToken",
    "MultiHeadSelfAttention",
    "PatchEmbedding",
    "PositionEmbedding",
    "SinCosPositionEmbedding2D",
    "TransformerBlock",
]
