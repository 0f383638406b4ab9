"""Finding the attention layers of a model (Michel et al., 2019)."""

import keras

from keras_attn.utils.model_layers import find_attention_layers


def attention_layers(model: keras.layers.Layer) -> dict[str, keras.layers.Layer]:
    """The attention layers of a model, nested ones included, in model order.

    The same as `keras_attn.utils.find_attention_layers`. The layers are
    found by `keras_attn.utils.find_layers`, so they come in
    the order the model runs them, also inside nested models and layers: a
    functional graph in the order of its calls, a `keras.Sequential` model
    in the order of its stack, any other model or layer in the order its
    sublayers were assigned. Layer `i` of the result is the `i`-th block of
    `build_bert_encoder`, also when the encoder is nested in a classifier.
    Subclasses of either type are included, among them KerasHub's
    `CachedMultiHeadAttention`.

    Args:
        model: a Keras model or layer; an attention layer itself is
            included.

    Returns:
        dict `name -> layer` of every `MultiHeadSelfAttention` and
        `keras.layers.MultiHeadAttention` inside `model`. `model` and its
        top-level layers are keyed by their name; nested ones by their path
        inside the model (for example `"block_0/attention"`, or
        `"encoder/layer_0/attention"` in a model that calls a model named
        `encoder`), so that keys are unique.

    Example:

    >>> x = keras.Input((5, 8))
    >>> model = keras.Model(x, MultiHeadSelfAttention(2, 4, name="attention")(x))
    >>> list(attention_layers(model))
    ['attention']
    """
    return find_attention_layers(model)
