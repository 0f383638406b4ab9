"""Models built from keras_attn layers."""

from keras_attn.models.logsparse_forecaster import build_logsparse_forecaster
from keras_attn.models.vision_transformer import build_vision_transformer

__all__ = ["build_vision_transformer", "build_logsparse_forecaster"]
