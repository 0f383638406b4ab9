"""Models built from keras_attn layers."""

from keras_attn.models.t2t_vit import T2T_VIT_VARIANTS, build_t2t_vit
from keras_attn.models.vision_transformer import build_vision_transformer

__all__ = ["T2T_VIT_VARIANTS", "build_t2t_vit", "build_vision_transformer"]
