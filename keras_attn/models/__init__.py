"""Models built from keras_attn layers."""

from keras_attn.models.adavit import AdaViT
from keras_attn.models.adavit_fast_path import AdaViTFastPath, FastPathResult
from keras_attn.models.vision_transformer import build_vision_transformer

__all__ = ["AdaViT", "AdaViTFastPath", "FastPathResult", "build_vision_transformer"]
