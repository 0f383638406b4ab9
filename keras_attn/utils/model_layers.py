"""The layers inside a Keras model, in model order.

This is the one module of keras_attn that relies on Keras internals: a layer
that is not a `keras.Model` lists its sublayers only through the private
`Layer._flatten_layers`. Everything in the library that looks for layers
inside a model goes through `find_layers`: `keras_attn.pruning.attention_layers`
(and through it head importance, head masks, head pruning and mimetic
initialization) and the feed-forward sites of `keras_attn.analysis`. Keras'
recursive `_flatten_layers` is not used: it lists the sublayers of a nested
model or layer last to first.
"""

import keras


def find_layers(
    model: keras.layers.Layer,
    types: type[keras.layers.Layer] | tuple[type[keras.layers.Layer], ...],
) -> dict[str, keras.layers.Layer]:
    """The layers of the given types inside a model, in model order.

    The walk is depth first: a layer comes before its sublayers, and the
    sublayers of each model or layer come in the order it runs them:

    - a functional model (also one nested in another model): the order of
      its graph, in which the model calls its layers, whatever the order they
      were created in;
    - a `keras.Sequential` model: the order of its stack;
    - any other layer or model (a subclassed model, a layer holding blocks as
      attributes or in a list): the order in which its sublayers were
      assigned, which is the order they run in when `call` uses them in the
      order `__init__` creates them.

    A layer reached twice (a shared layer) is listed once, where it is first
    reached.

    Args:
        model: a Keras model or layer; it is included itself if it has one of
            `types`.
        types: a layer class or a tuple of layer classes; their subclasses
            match too.

    Returns:
        dict `path -> layer` in model order. The path of `model` and of its
        direct sublayers is their name; a deeper layer's path joins the names
        from the direct sublayer down, for example `"encoder/layer_0/attention"`.

    Example:

    >>> inner = keras.Sequential([keras.layers.Dense(8, name="hidden")], name="inner")
    >>> x = keras.Input((4,))
    >>> model = keras.Model(x, keras.layers.Dense(2, name="logits")(inner(x)))
    >>> list(find_layers(model, keras.layers.Dense))
    ['inner/hidden', 'logits']
    """
    if not isinstance(model, keras.layers.Layer):
        raise ValueError(f"`model` must be a Keras model or layer. Received: model={model!r}")
    classes = types if isinstance(types, tuple) else (types,)
    if not classes or not all(
        isinstance(cls, type) and issubclass(cls, keras.layers.Layer) for cls in classes
    ):
        raise ValueError(
            f"`types` must be a layer class or a tuple of layer classes. Received: types={types!r}"
        )
    found = {}
    for path, layer in [(model.name, model), *_walk(model, "", {id(model)})]:
        if not isinstance(layer, classes):
            continue
        if path in found:
            raise ValueError(
                f"Two layers inside `model` have the path {path!r}: give them distinct "
                f"names. Received: model={model.name!r}"
            )
        found[path] = layer
    return found


def _walk(layer, prefix, seen):
    """Yields `(path, sublayer)` for every sublayer of `layer` not in `seen`, depth first."""
    for sublayer in _sublayers(layer):
        if id(sublayer) in seen:
            continue
        seen.add(id(sublayer))
        path = prefix + sublayer.name
        yield path, sublayer
        yield from _walk(sublayer, f"{path}/", seen)


def _sublayers(layer):
    """The direct sublayers of `layer`, in the order it runs them."""
    if isinstance(layer, keras.Model):
        # Functional: the graph's order; Sequential: the stack; subclassed: assignment order.
        return layer.layers
    return layer._flatten_layers(include_self=False, recursive=False)
