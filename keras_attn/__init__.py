"""keras_attn: self-attention layers, initializers, models and analysis tools for Keras 3.

The subpackages are imported on first use (`keras_attn.layers`, ...), so that
importing `keras_attn` alone, as the command line does, does not import Keras.
The layers register themselves with Keras when `keras_attn.layers` is
imported: do that before `keras.saving.load_model` reads a saved model.
"""

import importlib

__version__ = "0.1.0"

__all__ = ["initializers", "layers", "__version__"]


def __getattr__(name):
    if name in ("initializers", "layers"):
        return importlib.import_module(f"{__name__}.{name}")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
