"""keras_attn: self-attention layers, initializers, models and analysis tools for Keras 3."""

from keras_attn import distribution, initializers, layers

__version__ = "0.1.0"

__all__ = ["distribution", "initializers", "layers", "__version__"]
