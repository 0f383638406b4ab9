"""Small utilities shared by the command line, reproductions and notebooks."""

import importlib
import typing

if typing.TYPE_CHECKING:  # the same names, for type checkers and the API docs
    from keras_attn.utils.attention_conversion import (
        ConvertedAttentionBlock,
        convert_attention,
        from_keras_attention,
    )
    from keras_attn.utils.bootstrap import bootstrap_interval
    from keras_attn.utils.macs import count_macs, layer_macs, register_macs
    from keras_attn.utils.model_layers import (
        FeedForwardLayers,
        attention_projections,
        find_attention_layers,
        find_feed_forward_layers,
        find_layers,
        gate_heads,
        intercept_calls,
        record_calls,
    )
    from keras_attn.utils.results import (
        finish_run,
        is_small_run,
        run_metadata,
        write_benchmark,
        write_results,
    )
    from keras_attn.utils.timing import batch_latency_ms, median_seconds

# Loaded on first use: the layers import `keras_attn.utils.validation`, and
# `macs` imports the layers, so an eager import here would be circular.
_EXPORTS = {
    "ConvertedAttentionBlock": "attention_conversion",
    "FeedForwardLayers": "model_layers",
    "attention_projections": "model_layers",
    "batch_latency_ms": "timing",
    "bootstrap_interval": "bootstrap",
    "convert_attention": "attention_conversion",
    "count_macs": "macs",
    "find_attention_layers": "model_layers",
    "find_feed_forward_layers": "model_layers",
    "find_layers": "model_layers",
    "from_keras_attention": "attention_conversion",
    "gate_heads": "model_layers",
    "intercept_calls": "model_layers",
    "finish_run": "results",
    "is_small_run": "results",
    "layer_macs": "macs",
    "median_seconds": "timing",
    "record_calls": "model_layers",
    "register_macs": "macs",
    "run_metadata": "results",
    "write_benchmark": "results",
    "write_results": "results",
}

__all__ = [
    "ConvertedAttentionBlock",
    "FeedForwardLayers",
    "attention_projections",
    "batch_latency_ms",
    "bootstrap_interval",
    "convert_attention",
    "count_macs",
    "find_attention_layers",
    "find_feed_forward_layers",
    "find_layers",
    "from_keras_attention",
    "finish_run",
    "gate_heads",
    "intercept_calls",
    "is_small_run",
    "layer_macs",
    "median_seconds",
    "record_calls",
    "register_macs",
    "run_metadata",
    "write_benchmark",
    "write_results",
]


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
