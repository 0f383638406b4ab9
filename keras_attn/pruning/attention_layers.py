"""Finding the attention layers of a model (Michel et al., 2019)."""

import keras

from keras_attn.layers import MultiHeadSelfAttention

ATTENTION_TYPES = (MultiHeadSelfAttention, keras.layers.MultiHeadAttention)


def attention_layers(model):
    """The attention layers of a model, nested ones included, in model order.

    The order is the layer tracking order (depth first; for functional
    models, the order of the graph), so it is the same for two models built
    the same way. Subclasses of either type are included.

    Args:
        model: a built Keras model or layer; an attention layer itself is
            included.

    Returns:
        dict `name -> layer` of every `MultiHeadSelfAttention` and
        `keras.layers.MultiHeadAttention` inside `model`. `model` and its
        top-level layers are keyed by their name; nested ones by their path
        inside the model (for example `"block_0/attention"`), so that keys
        are unique.

    Example:

    >>> x = keras.Input((5, 8))
    >>> model = keras.Model(x, MultiHeadSelfAttention(2, 4, name="attention")(x))
    >>> list(attention_layers(model))
    ['attention']
    """
    top_level = {id(model), *(id(layer) for layer in getattr(model, "layers", []))}
    found = {}
    for layer in model._flatten_layers(include_self=True, recursive=True):
        if isinstance(layer, ATTENTION_TYPES):
            found[layer.name if id(layer) in top_level else layer.path] = layer
    return found
