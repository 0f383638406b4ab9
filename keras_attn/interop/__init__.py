"""keras_attn's tools on any Keras model: a user's, KerasHub's or keras_attn's.

The attention and feed-forward layers of a model in model order, and the one
way to reach inside them (intercepting, recording and gating their calls).
This package sits above the layers (it recognises keras_attn's own), and is
the one place that depends on Keras internals.
"""

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
    "FeedForwardLayers",
    "attention_projections",
    "find_attention_layers",
    "find_feed_forward_layers",
    "find_layers",
    "gate_heads",
    "intercept_calls",
    "record_calls",
]
