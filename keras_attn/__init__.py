"""keras_attn: self-attention layers, initializers, models and analysis tools for Keras 3.

Importing `keras_attn` imports Keras and registers every serializable class
(layers, initializers, losses, metrics, the AdaViT model and the converter's
block) with it, so a
`.keras` file that uses them loads with `keras.saving.load_model` after a
plain `import keras_attn`.
"""

from keras_attn._optional import import_keras

__version__ = "0.1.0"

import_keras()  # names the installed backends when the one Keras is set to is missing

from keras_attn import (  # noqa: E402
    distribution,
    initializers,
    interop,
    layers,
    losses,
    metrics,
    models,
)

__all__ = [
    "distribution",
    "initializers",
    "interop",
    "layers",
    "losses",
    "metrics",
    "models",
    "__version__",
]
