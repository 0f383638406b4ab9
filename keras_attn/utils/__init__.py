"""Small utilities shared by the command line, reproductions and notebooks.

The floor of the package: it imports nothing else of keras_attn, so every
other package may import it. (The MAC counter, which reads the layers, is in
`keras_attn.models`; finding layers in a model is `keras_attn.interop`.)
"""

from keras_attn.utils.bootstrap import bootstrap_interval
from keras_attn.utils.results import (
    finish_run,
    is_small_run,
    run_metadata,
    write_benchmark,
    write_results,
)
from keras_attn.utils.timing import batch_latency_ms, median_seconds

__all__ = [
    "batch_latency_ms",
    "bootstrap_interval",
    "finish_run",
    "is_small_run",
    "median_seconds",
    "run_metadata",
    "write_benchmark",
    "write_results",
]
