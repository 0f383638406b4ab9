"""Small utilities shared by the command line, reproductions and notebooks."""

from keras_attn.utils.macs import count_macs, layer_macs, register_macs
from keras_attn.utils.results import (
    finish_run,
    is_small_run,
    run_metadata,
    write_results,
)

__all__ = [
    "count_macs",
    "finish_run",
    "is_small_run",
    "layer_macs",
    "register_macs",
    "run_metadata",
    "write_results",
]
