"""The layers inside a Keras model, in model order, and a way to reach inside them.

This is the one module of keras_attn that relies on Keras internals, in three
places:

- finding layers: a layer that is not a `keras.Model` lists its sublayers
  only through the private `Layer._flatten_layers` (its recursive form is
  not used: it lists the sublayers of a nested model or layer last to
  first), and the feed-forward layers of KerasHub blocks are private
  attributes;
- reaching inside layers: `intercept_calls` replaces a layer's `call` on
  the instance for the duration of a `with` block (Keras 3 has no forward
  hooks), and always restores it; on entering and leaving the block it
  rebuilds the compiled functions that the Keras trainer keeps on a model
  (`predict_function`, `train_function`, `test_function`) for every live
  model holding one of the layers, found among Python's tracked objects;
- replacing sublayers: `replace_attributes` swaps the sublayers that a
  block's attributes hold (found by `held_layers`) through the block's
  private tracker, as its own `build` would have created them.

Everything in the library that looks for layers inside a model, or changes
or records what they compute, goes through this module:
`find_attention_layers` (head importance, head masks, head pruning, mimetic
initialization), `find_feed_forward_layers` and `record_calls` (the
feed-forward memories of `keras_attn.analysis`), `gate_heads` (the head
gates of `keras_attn.pruning.head_importance`), and `held_layers` with
`replace_attributes` (the attention of the blocks that
`keras_attn.interop.convert_attention` converts and
`keras_attn.pruning.prune_heads` prunes).
"""

import contextlib
import dataclasses
import functools
import gc
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.layers import MultiHeadSelfAttention, TransformerBlock
from keras_attn.utils.validation import check_bool, concrete, static_size

# `keras.layers.MultiHeadAttention` includes its KerasHub subclasses
# (`CachedMultiHeadAttention` of `BertBackbone`, `GPT2Backbone`, ...).
ATTENTION_TYPES = (MultiHeadSelfAttention, keras.layers.MultiHeadAttention)


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
    reached. A `ConvertedAttentionBlock` (from `convert_attention`) is not
    listed: the block it wraps stands at its path, so a converted model has
    the paths of the original.

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
    model = _unwrapped(model)
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
    for sublayer in map(_unwrapped, _sublayers(layer)):
        if id(sublayer) in seen:
            continue
        seen.add(id(sublayer))
        path = prefix + sublayer.name
        yield path, sublayer
        yield from _walk(sublayer, f"{path}/", seen)


def _unwrapped(layer):
    """The block a `ConvertedAttentionBlock` wraps, else `layer`.

    The wrapper carries its block's name: the block stands at the wrapper's
    path, so a converted model has the paths of the model it was converted
    from (not `"block/block/attention"`).
    """
    from keras_attn.interop.attention_conversion import ConvertedAttentionBlock  # imports us

    return layer.layer if isinstance(layer, ConvertedAttentionBlock) else layer


def _sublayers(layer):
    """The direct sublayers of `layer`, in the order it runs them."""
    if isinstance(layer, keras.Model):
        # Functional: the graph's order; Sequential: the stack; subclassed: assignment order.
        return layer.layers
    return layer._flatten_layers(include_self=False, recursive=False)


def is_graph_model(model):
    """Whether `model` is `Sequential` or functional (built from a graph of inputs)."""
    return isinstance(model, keras.Sequential) or hasattr(model, "_inputs_struct")


def held_layers(layer, layer_type):
    """The `layer_type` sublayers that attributes inside a non-model `layer` hold, at any depth.

    A block may hold them itself (KerasHub's `TransformerEncoder` holds its
    attention) or through its sublayers (KerasHub's `ViTEncoder` holds a list
    of blocks, each holding its attention). A model, a layer that is itself
    a `layer_type`, or an operation that is not a layer, holds none.

    Returns:
        dict `path -> (owner, attribute name)` in model order: the path of
        each held layer inside `layer`, as `find_layers(layer, ...)` keys it
        (for example `"self_attention_layer"` or `"transformer_block_1/mha"`),
        and the layer (`layer` or one of its sublayers) whose attribute
        holds it.
    """
    if not isinstance(layer, keras.layers.Layer) or isinstance(layer, (keras.Model, layer_type)):
        return {}
    owners = [("", layer), *((f"{path}/", sub) for path, sub in _walk(layer, "", {id(layer)}))]
    held = {}
    for prefix, owner in owners:
        if isinstance(owner, (keras.Model, layer_type)):
            continue
        # The torch backend keeps sublayers in `_modules`, not in the instance dict.
        attributes = {**vars(owner), **vars(owner).get("_modules", {})}
        for name, value in sorted(attributes.items()):
            if isinstance(value, layer_type):
                held[prefix + value.name] = (owner, name)
    return held


def replace_attributes(layer, replacements):
    """Sets `layer.<name> = sublayer` for each item of `replacements`, in place.

    A built layer locks its state: the old sublayers (and their weights) are
    untracked and the new ones tracked, as the layer's own `build` would
    have created them.
    """
    layer._tracker.unlock()
    for name, sublayer in replacements.items():
        layer._tracker.untrack(getattr(layer, name))
        delattr(layer, name)
        setattr(layer, name, sublayer)
    layer._tracker.lock()


def find_attention_layers(model: keras.layers.Layer) -> dict[str, keras.layers.Layer]:
    """The attention layers of a model, in model order.

    The attention layers are `keras_attn.layers.MultiHeadSelfAttention`,
    `keras.layers.MultiHeadAttention` and their subclasses, among them
    KerasHub's `CachedMultiHeadAttention` (used by `BertBackbone`,
    `GPT2Backbone` and most KerasHub transformers) and the attention of
    `ViTBackbone`. They share one kernel layout: query, key and value
    kernels `(dim, heads, head_dim)` (or `(kernel_size, dim, heads,
    head_dim)` for a convolutional query and key) and an output kernel
    `(heads, head_dim, dim)`; `attention_projections` returns them.

    Args:
        model: a Keras model or layer; an attention layer itself is included.

    Returns:
        dict `path -> layer`, ordered and keyed as by `find_layers`.

    Example:

    >>> x = keras.Input((5, 8))
    >>> y = MultiHeadSelfAttention(2, 4, name="first")(x)
    >>> y = keras.layers.MultiHeadAttention(2, 4, name="second")(y, y)
    >>> list(find_attention_layers(keras.Model(x, y)))
    ['first', 'second']
    """
    return find_layers(model, ATTENTION_TYPES)


def attention_projections(layer: keras.layers.Layer) -> dict[str, keras.layers.Layer]:
    """The query, key, value and output projections of an attention layer.

    Args:
        layer: a built layer of one of the types of `find_attention_layers`.

    Returns:
        dict with keys `"query"`, `"key"`, `"value"` and `"output"`; each
        value has a `kernel` and a `bias` (`None` without bias).

    Example:

    >>> layer = MultiHeadSelfAttention(2, 4)
    >>> _ = layer(np.ones((1, 3, 8)))
    >>> {role: tuple(dense.kernel.shape) for role, dense in attention_projections(layer).items()}
    {'query': (8, 2, 4), 'key': (8, 2, 4), 'value': (8, 2, 4), 'output': (2, 4, 8)}
    """
    if not isinstance(layer, ATTENTION_TYPES):
        raise ValueError(
            "`layer` must be a MultiHeadSelfAttention or keras.layers.MultiHeadAttention. "
            f"Received: layer={type(layer).__name__} named {getattr(layer, 'name', None)!r}"
        )
    if not layer.built:
        raise ValueError(
            f"Layer {layer.name!r} is not built: call the model on data (or build it) "
            f"first. Received: built={layer.built}"
        )
    return {
        "query": layer.query_dense,
        "key": layer.key_dense,
        "value": layer.value_dense,
        "output": layer.output_dense,
    }


@dataclasses.dataclass(frozen=True)
class FeedForwardLayers:
    """The two `Dense` layers of a transformer block's feed-forward network.

    Args:
        hidden: the first `Dense` layer, `f(x K + b)`.
        output: the second `Dense` layer, `m V + c`.
        norm: the layer norm applied before `hidden` in a pre-norm block,
            whose input is the residual stream; `None` in a post-norm block,
            where the input of `hidden` is the residual stream.
    """

    hidden: keras.layers.Layer
    output: keras.layers.Layer
    norm: keras.layers.Layer | None = None


def find_feed_forward_layers(model: keras.layers.Layer) -> dict[str, FeedForwardLayers]:
    """The feed-forward networks of the transformer blocks of a model, in model order.

    The blocks recognised are keras_attn's `TransformerBlock`, KerasHub's
    `TransformerEncoder` and `TransformerDecoder` (the blocks of
    `BertBackbone`, `GPT2Backbone` and many more) and the encoder block of
    KerasHub's `ViTBackbone`.

    Args:
        model: a built Keras model or layer.

    Returns:
        dict `block path -> FeedForwardLayers`, ordered and keyed as by
        `find_layers`.

    Example:

    >>> x = keras.Input((3, 8))
    >>> model = keras.Model(x, TransformerBlock(2, 16, name="block")(x))
    >>> layers = find_feed_forward_layers(model)["block"]
    >>> layers.hidden.name, layers.output.name, layers.norm.name
    ('mlp_hidden', 'mlp_output', 'mlp_norm')
    """
    found = {}
    for path, layer in find_layers(model, keras.layers.Layer).items():
        feed_forward = _feed_forward_of(layer)
        if feed_forward is not None:
            found[path] = feed_forward
    return found


def _feed_forward_of(block):
    """The `FeedForwardLayers` of a known transformer block, else `None`."""
    if isinstance(block, TransformerBlock):
        norm = block.mlp_norm if block.normalize_first else None
        return FeedForwardLayers(block.mlp_hidden, block.mlp_output, norm)
    if hasattr(block, "_feedforward_intermediate_dense"):  # KerasHub Transformer{En,De}coder
        norm = block._feedforward_layer_norm if block.normalize_first else None
        return FeedForwardLayers(
            block._feedforward_intermediate_dense, block._feedforward_output_dense, norm
        )
    mlp = getattr(block, "mlp", None)
    if type(block).__name__ == "ViTEncoderBlock" and mlp is not None:  # KerasHub ViT (pre-norm)
        return FeedForwardLayers(mlp.dense_1, mlp.dense_2, block.layer_norm_2)
    return None


@contextlib.contextmanager
def intercept_calls(
    layers: Iterable[keras.layers.Layer],
    interceptor: Callable[..., Any],
    *,
    compiled_calls: bool = True,
) -> Iterator[None]:
    """Routes every call of the given layers through `interceptor` inside a `with` block.

    Inside the block, a call `layer(*args, **kwargs)` runs
    `interceptor(layer, call, *args, **kwargs)`, where `call` is the layer's
    own `call`: the interceptor returns the layer's outputs, typically
    `call(*args, **kwargs)` with changed arguments, or after recording them.
    Keras' `__call__` (building, masks, dtype casts) is unchanged around it.
    On leaving the block, normally or by an exception, every layer gets its
    own `call` back. Blocks nest: an inner interceptor on the same layer
    wraps the outer one, and blocks may be left in any order.

    Works on every backend, for eager calls, for the backend's autodiff
    (`jax.grad` traces the intercepted calls) and for `model.predict`,
    `fit` and `evaluate` (and their `*_on_batch` forms), also of a model
    that holds the layers at any depth: on entering and on leaving the
    block, the compiled functions that Keras keeps on each live model
    holding one of the layers are rebuilt, so that a compiled call inside
    the block runs the interceptors and one after it runs the layers as
    they were (it is traced again at its next call). A compiled function
    calls the interceptor when it is traced, once, not at every batch. A
    function you compile yourself (`tf.function`, `jax.jit`) keeps what it
    traced.

    This is the one place keras_attn changes a layer's computation from
    outside: `gate_heads` and `record_calls` are built on it.

    Args:
        layers: iterable of Keras layers (a layer listed twice is
            intercepted once).
        interceptor: callable `interceptor(layer, call, *args, **kwargs)`
            returning the layer's outputs.
        compiled_calls: bool, whether `model.predict`, `fit` and `evaluate`
            inside the block reach the interceptors (their compiled
            functions are rebuilt on TensorFlow and JAX, as above; finding
            the models holding the layers looks through every live Python
            object, tens of milliseconds). Pass `False` for a block that
            only calls models directly or through autodiff: a compiled
            function is then left as it is, and one traced before the block
            would run without the interceptors.

    Yields:
        None.

    Example:

    >>> dense = keras.layers.Dense(2, kernel_initializer="ones")
    >>> def doubled_inputs(layer, call, inputs, *args, **kwargs):
    ...     return call(inputs * 2.0, *args, **kwargs)
    >>> with intercept_calls([dense], doubled_inputs):
    ...     keras.ops.convert_to_numpy(dense(np.ones((1, 3)))).tolist()
    [[6.0, 6.0]]
    """
    layers = list({id(layer): layer for layer in layers}.values())
    for layer in layers:
        if not isinstance(layer, keras.layers.Layer):
            raise ValueError(f"`layers` must hold Keras layers. Received: {layer!r} in layers")
    if not callable(interceptor):
        raise ValueError(f"`interceptor` must be callable. Received: interceptor={interceptor!r}")
    rebuilt = layers if check_bool("compiled_calls", compiled_calls) else []
    block = object()  # this block's entries in the layers' interceptions
    try:
        for layer in layers:
            _interception(layer).interceptors.append((block, interceptor))
        _rebuild_compiled_functions(rebuilt)
        yield
    finally:
        for layer in layers:
            _release(layer, block)
        _rebuild_compiled_functions(rebuilt)


# The layers that open `intercept_calls` blocks intercept: id(layer) -> `_Interception`.
_INTERCEPTIONS = {}


@dataclasses.dataclass
class _Interception:
    """The interceptors of one layer, outermost block first, and its `call` before them.

    Attributes:
        layer: the intercepted layer.
        own_call: the layer's `call` before the first block.
        instance_call: the `call` set on the instance before the first
            block, restored after the last one; `None` when the class's
            `call` ran.
        interceptors: list of `(block, interceptor)`, one per open block.
    """

    layer: keras.layers.Layer
    own_call: Callable[..., Any]
    instance_call: Callable[..., Any] | None
    interceptors: list = dataclasses.field(default_factory=list)

    def call(self, *args, **kwargs):
        call = self.own_call
        for _, interceptor in self.interceptors:  # each block wraps the ones opened before it
            call = functools.partial(interceptor, self.layer, call)
        return call(*args, **kwargs)


def _interception(layer):
    """The `_Interception` of `layer`, installed as its `call` if it has none yet."""
    if id(layer) not in _INTERCEPTIONS:
        _INTERCEPTIONS[id(layer)] = _Interception(layer, layer.call, vars(layer).get("call"))
        layer.call = _INTERCEPTIONS[id(layer)].call
    return _INTERCEPTIONS[id(layer)]


def _release(layer, block):
    """Removes `block`'s interceptors from `layer`; after the last one, restores its `call`."""
    interception = _INTERCEPTIONS.get(id(layer))
    if interception is None:
        return
    interception.interceptors = [
        entry for entry in interception.interceptors if entry[0] is not block
    ]
    if interception.interceptors:
        return
    del _INTERCEPTIONS[id(layer)]
    if interception.instance_call is None:
        del layer.call
    else:
        layer.call = interception.instance_call


def _rebuild_compiled_functions(layers):
    """Rebuilds the compiled functions of `predict`, `fit` and `evaluate` that run `layers`.

    The Keras trainer keeps the function it traced on the model
    (`predict_function`, `train_function`, `test_function`) and runs it
    again without calling the layers' `call`: one traced before a block
    would ignore its interceptors, one traced inside would keep them after
    it. Each is rebuilt (`make_*_function(force=True)`, traced again at its
    next call; a `fit` under way goes on with the new one) on every live
    model holding one of `layers`. Keras keeps no list of its models, so
    they are looked up among the objects Python's garbage collector tracks.
    The torch trainer needs none of it: it calls the model eagerly, or
    through `torch.compile`, whose guards see the change of `call`.
    """
    if not layers or keras.backend.backend() == "torch":
        return
    wanted = {id(layer) for layer in layers}
    for model in _live_models():
        kinds = [kind for kind in ("predict", "train", "test") if _compiled(model, kind)]
        if kinds and wanted & {id(model), *(id(layer) for _, layer in _walk(model, "", set()))}:
            for kind in kinds:
                getattr(model, f"make_{kind}_function")(force=True)


def _compiled(model, kind):
    return getattr(model, f"{kind}_function", None) is not None


def _live_models():
    """Every `keras.Model` that Python's garbage collector tracks."""
    model_types = _subclasses(keras.Model)
    # Compared by type: `isinstance` would call `__class__` on proxies, dead ones included.
    return [obj for obj in gc.get_objects() if type(obj) in model_types]


def _subclasses(cls):
    """`cls` and all its subclasses."""
    found = {cls}
    for subclass in cls.__subclasses__():
        found |= _subclasses(subclass)
    return found


@contextlib.contextmanager
def record_calls(
    layers: Iterable[keras.layers.Layer],
    *,
    compiled_calls: bool = True,
) -> Iterator[dict[keras.layers.Layer, list[tuple[Tensor, Tensor]]]]:
    """Records the first input and the outputs of every call of the given layers.

    It records values: the calls of a model called directly (`model(x)`),
    or of `model.predict`, `fit` and `evaluate` of a model compiled with
    `run_eagerly=True`. A call traced for compilation (by a compiled
    `predict`, `fit` or `evaluate`, a `tf.function` or `jax.jit`) or for
    `jax.grad` has no values: it is not recorded, it runs as it would
    without the block, and leaving the block then raises a `ValueError`
    naming the layer (`intercept_calls` reaches inside traced calls).

    Args:
        layers: iterable of Keras layers.
        compiled_calls: bool, whether a compiled `predict`, `fit` or
            `evaluate` inside the block is caught even if it was traced
            before the block (see `intercept_calls`); `False` for a block
            that only calls models directly.

    Yields:
        dict `layer -> list of (first positional input, outputs)`, one entry
        per call made inside the block, in call order; it keeps its entries
        after the block.

    Example:

    >>> dense = keras.layers.Dense(2)
    >>> with record_calls([dense]) as records:
    ...     _ = dense(np.ones((1, 3)))
    >>> [tuple(outputs.shape) for _, outputs in records[dense]]
    [(1, 2)]
    """
    layers = list(layers)
    records = {layer: [] for layer in layers}
    traced = {}  # layer name -> the type of its traced outputs

    def record(layer, call, inputs, *args, **kwargs):
        outputs = call(inputs, *args, **kwargs)
        first_output = keras.tree.flatten(outputs)[0]
        if concrete(first_output) is None:
            # Not raised here: JAX's `predict` would leave the model's variables released.
            traced[layer.name] = type(first_output).__name__
        else:
            records[layer].append((inputs, outputs))
        return outputs

    with intercept_calls(layers, record, compiled_calls=compiled_calls):
        yield records
    if traced:
        raise ValueError(
            "`record_calls` records the values of calls, but these layers were traced "
            "(by a compiled `model.predict`, `fit` or `evaluate`, a `tf.function`, "
            "`jax.jit` or `jax.grad`), where their outputs have no values: call the model "
            "directly (`model(x)`) or compile it with `run_eagerly=True`; `intercept_calls` "
            f"reaches inside traced calls. Received: traced outputs {traced}"
        )


@contextlib.contextmanager
def gate_heads(
    layers: Mapping[str, keras.layers.Layer],
    make_gate: Callable[[str, Tensor], Tensor],
    *,
    compiled_calls: bool = True,
) -> Iterator[dict[str, list[Tensor]]]:
    """Multiplies the output of every head, at every token, by a gate.

    Inside the block, each call of an attention layer multiplies the input of
    its output projection, the heads' outputs `(batch, length, heads,
    head_dim)`, by `make_gate(name, ones)`, where `ones` has shape
    `(batch, length, heads, 1)`; the gradient of a loss with respect to a
    gate of ones is the per-token head-mask gradient of Michel et al. (2019).
    (A Keras `MultiHeadAttention` over several `attention_axes` has one
    `length` axis per attended axis.)
    The gates hold in eager calls and in `model.predict`, `fit` and
    `evaluate` of any model holding the layers, and not after the block
    (see `intercept_calls`); a compiled `predict`, `fit` or `evaluate`
    calls `make_gate` once, when it is traced, and its gate is a traced
    tensor.

    Args:
        layers: dict `name -> attention layer`, as from `find_attention_layers`.
        make_gate: callable `make_gate(name, ones)` returning the gate of
            layer `name`, broadcastable to `(batch, length, heads, head_dim)`
            without changing that shape; another gate raises a `ValueError`.
        compiled_calls: bool, whether `model.predict`, `fit` and `evaluate`
            inside the block are gated (see `intercept_calls`); `False` for
            a block that only calls models directly or through autodiff.

    Yields:
        dict `name -> list of the gates`, one per call of the layer made
        inside the block (one per trace of a compiled function).

    Example:

    >>> layer = MultiHeadSelfAttention(2, 4, name="attention")
    >>> x = np.ones((1, 3, 8))
    >>> _ = layer(x)
    >>> with gate_heads({"attention": layer}, lambda name, ones: ones * 0.0) as gates:
    ...     float(keras.ops.max(keras.ops.abs(layer(x) - layer.output_dense.bias)))
    0.0
    >>> [tuple(gate.shape) for gate in gates["attention"]]
    [(1, 3, 2, 1)]
    """
    gates = {name: [] for name in layers}
    names = {id(attention_projections(layer)["output"]): name for name, layer in layers.items()}

    def gated(projection, call, inputs, *args, **kwargs):
        name = names[id(projection)]
        gate = make_gate(name, keras.ops.ones_like(inputs[..., :1]))  # (batch, length, heads, 1)
        _check_gate(name, gate, inputs)
        gates[name].append(gate)
        return call(inputs * gate, *args, **kwargs)

    projections = [attention_projections(layer)["output"] for layer in layers.values()]
    with intercept_calls(projections, gated, compiled_calls=compiled_calls):
        yield gates


def _check_gate(name, gate, heads):
    """Raises unless `gate` broadcasts to the shape of `heads` without changing it.

    Sizes unknown when tracing (`None`, or symbolic) are not compared.
    """
    gate_shape = tuple(gate.shape) if hasattr(gate, "shape") else np.shape(gate)
    heads_shape = tuple(heads.shape)
    fits = len(gate_shape) <= len(heads_shape) and all(
        static_size(size) in (1, None) or static_size(target) in (static_size(size), None)
        for size, target in zip(reversed(gate_shape), reversed(heads_shape), strict=False)
    )
    if not fits:
        raise ValueError(
            f"`make_gate` must return a gate that broadcasts to the heads' outputs of layer "
            f"{name!r}, of shape {heads_shape} (batch, length, heads, head_dim). "
            f"Received: gate.shape={gate_shape}"
        )
