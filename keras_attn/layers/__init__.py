"""Attention layers of keras_attn, built on `MultiHeadSelfAttention`."""

from keras_attn.layers.attention_pattern import AttentionPattern, CausalWindowPattern
from keras_attn.layers.bit_string_features import BitStringFeatures
from keras_attn.layers.bsa_rec_block import BSARecBlock
from keras_attn.layers.checked_embedding import CheckedEmbedding
from keras_attn.layers.class_token import ClassToken
from keras_attn.layers.convolutional_self_attention import ConvolutionalSelfAttention
from keras_attn.layers.fourier_filter import FourierFilter
from keras_attn.layers.gaussian_head import GaussianHead
from keras_attn.layers.gumbel_sigmoid_gate import GumbelSigmoidGate
from keras_attn.layers.learned_scale_positions import LearnedScalePositions
from keras_attn.layers.log_sparse_attention import LogSparseAttention
from keras_attn.layers.log_sparse_pattern import LogSparsePattern
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.layers.patch_embedding import PatchEmbedding
from keras_attn.layers.position_embedding import PositionEmbedding
from keras_attn.layers.sin_cos_position_embedding_1d import SinCosPositionEmbedding1D
from keras_attn.layers.sin_cos_position_embedding_2d import SinCosPositionEmbedding2D
from keras_attn.layers.soft_split import SoftSplit
from keras_attn.layers.t2t_module import T2TModule
from keras_attn.layers.token_performer import TokenPerformer
from keras_attn.layers.token_transformer import TokenTransformer
from keras_attn.layers.transformer_block import TransformerBlock

__all__ = [
    "AttentionPattern",
    "BSARecBlock",
    "BitStringFeatures",
    "CheckedEmbedding",
    "CausalWindowPattern",
    "ClassToken",
    "ConvolutionalSelfAttention",
    "FourierFilter",
    "GaussianHead",
    "GumbelSigmoidGate",
    "LearnedScalePositions",
    "LogSparseAttention",
    "LogSparsePattern",
    "MultiHeadSelfAttention",
    "PatchEmbedding",
    "PositionEmbedding",
    "SinCosPositionEmbedding1D",
    "SinCosPositionEmbedding2D",
    "SoftSplit",
    "T2TModule",
    "TokenPerformer",
    "TokenTransformer",
    "TransformerBlock",
]
