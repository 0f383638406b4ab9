"""Models built from keras_attn layers."""

from keras_attn.models.bsarec import build_bsarec, build_sasrec
from keras_attn.models.vision_transformer import build_vision_transformer

__all__ = ["build_bsarec", "build_sasrec", "build_vision_transformer"]
