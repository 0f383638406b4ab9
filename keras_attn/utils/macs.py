"""Deprecated alias of `keras_attn.models.macs`, kept for one release."""

import warnings

from keras_attn.models.macs import count_macs, layer_macs, register_macs

warnings.warn(
    "`keras_attn.utils.macs` is deprecated; import `count_macs`, `layer_macs` and "
    "`register_macs` from `keras_attn.models`.",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["count_macs", "layer_macs", "register_macs"]
