"""keras_attn: self-attention layers, initializers, models and analysis tools for Keras 3.

Importing `keras_attn` does not import Keras, so the command line answers at
once. The subpackages load on first use: the first of `keras_attn.layers`,
`keras_attn.models`, ... (or `from keras_attn import layers`) imports every
subpackage with serializable classes (layers, initializers, losses, metrics
and the AdaViT model), which registers them all with Keras. A `.keras` file
that uses them then loads with `keras.saving.load_model`.
"""

import importlib

__version__ = "0.1.0"

# The subpackages that register serializable classes with Keras, imported
# together on the first use of any of them.
_SUBPACKAGES = ("distribution", "initializers", "layers", "losses", "metrics", "models")

__all__ = [*_SUBPACKAGES, "__version__"]


def __getattr__(name):
    if name not in _SUBPACKAGES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    for subpackage in _SUBPACKAGES:
        importlib.import_module(f"{__name__}.{subpackage}")
    return importlib.import_module(f"{__name__}.{name}")
