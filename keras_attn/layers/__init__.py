"""Attention layers of keras_attn, built on `MultiHeadSelfAttention`."""

from keras_attn.layers.attention_pattern import AttentionPattern, CausalWindowPattern
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.layers.position_embedding import PositionEmbedding

__all__ = ["AttentionPattern", "CausalWindowPattern", "MultiHeadSelfAttention", "PositionEmbedding"]
