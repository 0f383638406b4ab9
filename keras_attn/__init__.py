"""keras_attn: self-attention layers, initializers, models and analysis tools for Keras 3.

Importing `keras_attn` registers every serializable class (layers,
initializers, losses, metrics and the AdaViT model) with Keras, so a `.keras`
file that uses them loads with `keras.saving.load_model` after a plain
`import keras_attn`.
"""

import os

__version__ = "0.1.0"

# Set only by `keras_attn_cli` while it parses the command line, so that
# `keras-attn --help` answers without importing Keras; the command it then
# runs imports what it needs.
if os.environ.get("_KERAS_ATTN_DEFER_IMPORTS") != "1":
    from keras_attn._optional import import_keras

    import_keras()  # names the installed backends when Keras' one is missing
    from keras_attn import distribution, initializers, layers, losses, metrics, models

__all__ = ["distribution", "initializers", "layers", "losses", "metrics", "models", "__version__"]
