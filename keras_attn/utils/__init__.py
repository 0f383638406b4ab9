"""Small utilities shared by the command line, reproductions and notebooks."""

import importlib

# Loaded on first use: the layers import `keras_attn.utils.validation`, and
# `macs` imports the layers, so an eager import here would be circular.
_EXPORTS = {
    "count_macs": "macs",
    "finish_run": "results",
    "is_small_run": "results",
    "layer_macs": "macs",
    "register_macs": "macs",
    "run_metadata": "results",
    "write_results": "results",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{_EXPORTS[name]}"), name)
