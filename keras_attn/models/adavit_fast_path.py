"""The former home of the AdaViT fast path, kept so that its imports still work.

The fast path lives in `keras_attn.models.adavit.fast_path`.
"""

from keras_attn.models.adavit.fast_path import AdaViTFastPath, FastPathResult, xla_function

__all__ = ["AdaViTFastPath", "FastPathResult", "xla_function"]
