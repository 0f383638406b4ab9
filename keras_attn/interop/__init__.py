"""keras_attn's tools on any Keras model: a user's, KerasHub's or keras_attn's.

The attention and feed-forward layers of a model in model order, the one
way to reach inside them (intercepting, recording and gating their calls),
the converter that gives a model's Keras attention keras_attn's, and the one
that writes a KerasHub ViT out as keras_attn's ViT layers.
This package sits above the layers (it recognises keras_attn's own), and is
the one place that depends on Keras internals.
"""

from keras_attn.interop.attention_conversion import (
    ConvertedAttentionBlock,
    convert_attention,
    from_keras_attention,
)
from keras_attn.interop.keras_hub_vit import convert_keras_hub_vit
from keras_attn.interop.model_layers import (
    FeedForwardLayers,
    attention_projections,
    find_attention_layers,
    find_feed_forward_layers,
    find_layers,
    gate_heads,
    intercept_calls,
    record_calls,
)

__all__ = [
    "ConvertedAttentionBlock",
    "FeedForwardLayers",
    "attention_projections",
    "convert_attention",
    "convert_keras_hub_vit",
    "find_attention_layers",
    "find_feed_forward_layers",
    "find_layers",
    "from_keras_attention",
    "gate_heads",
    "intercept_calls",
    "record_calls",
]
