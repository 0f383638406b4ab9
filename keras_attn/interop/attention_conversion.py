"""Give an existing model keras_attn attention, with its weights carried over.

`from_keras_attention` turns one built `keras.layers.MultiHeadAttention`
(or a KerasHub subclass of it) used for self-attention into a
`keras_attn.layers.MultiHeadSelfAttention` with the same weights and the
same outputs. `convert_attention` rebuilds a functional or `Sequential`
model (a KerasHub backbone included) with every such layer converted,
also the ones held inside blocks such as KerasHub's `TransformerEncoder`,
`TransformerDecoder` and `ViTEncoder`. Options such as `attention_pattern`
or `logit_scale` then change the attention of the converted layers.
"""

import contextlib
import inspect
from typing import Any

import keras

from keras_attn.interop.model_layers import (
    find_layers,
    held_layers,
    is_graph_model,
    replace_attributes,
)
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.utils.validation import check_int

# Arguments of `MultiHeadSelfAttention` that the converted weights determine.
SET_BY_WEIGHTS = ("num_heads", "key_dim", "value_dim", "output_dim", "use_bias", "output_use_bias")

# What `from_keras_attention` does with each constructor argument of the layers it
# converts, base `Layer` arguments included (a test walks their signatures):
# - read from the weights: the sizes and the biases;
FROM_WEIGHTS = ("num_heads", "key_dim", "value_dim", "output_shape", "use_bias")
# - carried over as the `MultiHeadSelfAttention` argument of the same name;
CARRIED = (
    "dropout",
    "kernel_initializer",
    "bias_initializer",
    "kernel_regularizer",
    "bias_regularizer",
    "seed",
    "trainable",
    "dtype",
    "autocast",
    "name",
)
# - `MultiHeadSelfAttention` has no such option: a layer that sets one is refused;
#   the values listed here leave it unset. (Keras' `activity_regularizer` adds a loss
#   for each of the four projections' outputs; the base layer argument of
#   `MultiHeadSelfAttention` regularizes its output instead.)
REFUSED = {
    "activity_regularizer": (None,),
    "attention_axes": (None, (1,), [1]),
    "sliding_window": (None,),
    "use_gate": (False,),
    "kernel_constraint": (None,),
    "bias_constraint": (None,),
}
# - a choice of kernel, not of what is computed: the converted layer makes its own (its
#   dense attention runs through `keras.ops.dot_product_attention`, flash where it can).
KERNEL_CHOICES = ("flash_attention",)


def from_keras_attention(
    layer: keras.layers.MultiHeadAttention, **options: Any
) -> MultiHeadSelfAttention:
    """A `MultiHeadSelfAttention` with the weights of a built Keras attention layer.

    The new layer gives the same outputs as `layer` called for
    self-attention (`layer(query=x, value=x)`) and takes the same call
    arguments. Queries with no visible key (padded queries) are the one
    difference: they output zeros, where `keras.layers.MultiHeadAttention`
    averages over all keys; pass `additive_mask=-1e9` to reproduce that too.

    Every constructor argument of `layer` is carried over (dropout,
    initializers, kernel and bias regularizers, seed, `trainable`, dtype
    policy, `autocast` and name) or read from the weights (the sizes and
    the biases). A layer that sets an option `MultiHeadSelfAttention` does
    not have (attention axes, a sliding window, a gate, constraints, an
    activity regularizer, which Keras applies to each projection) is
    refused with a `ValueError` naming it. `flash_attention` is a choice of
    kernel: the new layer makes its own (its dense attention runs through
    `keras.ops.dot_product_attention`).

    Args:
        layer: a built `keras.layers.MultiHeadAttention`, or KerasHub's
            `CachedMultiHeadAttention` (other subclasses compute attention
            their own way and are refused), whose query, key and value come
            from inputs of one size, with the default attention axes, no
            gate, no sliding window and no constraints.
        **options: `MultiHeadSelfAttention` arguments that replace the
            copied ones, for example `attention_pattern=LogSparsePattern()`
            or `logit_scale="log_length"`. The sizes (`num_heads`, `key_dim`,
            `value_dim`, `output_dim`, `use_bias`, `output_use_bias`) come
            from the weights and cannot be given.

    Returns:
        A built `MultiHeadSelfAttention` named like `layer`.

    Example:

    >>> mha = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    >>> x = np.random.rand(1, 5, 8).astype("float32")
    >>> expected = mha(x, x)
    >>> core = from_keras_attention(mha)
    >>> bool(np.allclose(core(query=x, value=x), expected, atol=1e-5))
    True
    """
    _check_options(options)
    core = _built_core(layer, options)
    for name in ("query_dense", "key_dense", "value_dense", "output_dense"):
        pairs = zip(getattr(core, name).weights, getattr(layer, name).weights, strict=True)
        for target, source in pairs:
            assign_copy(target, source)
    return core


def _built_core(layer, options, num_heads=None):
    """A built `MultiHeadSelfAttention` sized like `layer`, with `num_heads` heads if given."""
    config = _core_config(layer)
    if num_heads is not None:
        config["num_heads"] = num_heads
    core = MultiHeadSelfAttention(**{**config, **options})
    with contextlib.ExitStack() as scopes:
        # Weights named like the converted ones: "block/attention/query/kernel".
        for scope in layer.path.split("/")[:-1]:
            scopes.enter_context(keras.name_scope(scope))
        core.build((None, None, layer.query_dense.kernel.shape[0]))
    return core


def convert_attention(model: keras.Model, **options: Any) -> keras.Model:
    """A copy of `model` whose Keras attention layers are `MultiHeadSelfAttention`.

    Every layer is copied with its weights; each `keras.layers.MultiHeadAttention`
    becomes a `MultiHeadSelfAttention` (see `from_keras_attention`), also
    inside nested functional models and inside layers that hold one as an
    attribute, themselves or through their sublayers (KerasHub's
    `TransformerEncoder` and `TransformerDecoder` blocks, and the
    `ViTEncoder` of `ViTBackbone`, which come back wrapped in a
    `ConvertedAttentionBlock`). A layer whose config holds entries its
    constructor does not take, so that its own `from_config` fails (KerasHub's
    `ViTPatchingAndEmbedding`, on which `keras.models.clone_model` fails too),
    is copied inside a `ConvertedAttentionBlock` as well, which saves it
    without them. The copy is a functional model (a KerasHub backbone comes
    back as a `keras.Model` with the same inputs and outputs), saves to
    `.keras` and loads back with its attention. `model` itself is not
    changed; a model without Keras attention, or a layer that cannot be
    converted or copied, raises a `ValueError` naming it.

    Args:
        model: a functional or `Sequential` Keras model.
        **options: `MultiHeadSelfAttention` arguments given to every
            converted layer, for example `logit_scale="log_length"`.

    Returns:
        The converted `keras.Model`.
    """
    if not isinstance(model, keras.Model) or not is_graph_model(model):
        raise ValueError(
            "`model` must be a functional or Sequential Keras model; convert the attention "
            "layers of a subclassed model with `from_keras_attention`. Received: "
            f"model={model!r}"
        )
    _check_options(options)
    if not find_layers(model, keras.layers.MultiHeadAttention):
        raise ValueError(
            "`model` holds no `keras.layers.MultiHeadAttention` to convert (KerasHub's Llama, "
            "Gemma and Mistral backbones, for example, have attention layers of their own). "
            f"Received: model={model.name!r}"
        )
    copies = []

    def convert(layer):
        if isinstance(layer, keras.layers.MultiHeadAttention):
            return from_keras_attention(layer, **options)
        if held_layers(layer, keras.layers.MultiHeadAttention):
            return ConvertedAttentionBlock(layer, attention_options=options)
        copy = rebuilt_layer(layer)
        if getattr(layer, "weights", None):
            copies.append((layer, copy))
        return copy

    converted = keras.models.clone_model(model, clone_function=convert, recursive=True)
    for layer, copy in copies:
        copy.set_weights(layer.get_weights())
    return converted


def assign_copy(variable: keras.Variable, value: keras.Variable) -> None:
    """Assigns a copy of `value` to `variable`, so that the two share no buffer.

    On JAX, assigning one variable to another shares its array, and a
    compiled `predict`, `fit` or `evaluate` of the model holding either
    donates it: the other model's weight is then deleted.
    """
    variable.assign(keras.ops.convert_to_numpy(value))


def rebuilt_layer(layer: keras.Operation) -> keras.Operation:
    """A new layer (or operation) like `layer`, from its config; the caller sets its weights.

    The copy is `layer`'s class built by its `from_config`, unless that
    fails on entries of the config that the constructor does not take
    (KerasHub's `ViTPatchingAndEmbedding` writes the derived `num_patches`
    and `num_positions`, so `keras.models.clone_model` fails on it): that
    layer is copied, with its weights, inside a `ConvertedAttentionBlock`,
    which rebuilds and saves it without them.
    """
    if not isinstance(layer, keras.layers.Layer) or _rebuilds_from_config(layer):
        return layer.__class__.from_config(layer.get_config())
    return ConvertedAttentionBlock(layer)


@keras.saving.register_keras_serializable(package="keras_attn")
class ConvertedAttentionBlock(keras.layers.Layer):
    """A copy of a block whose Keras attention sublayers run as `MultiHeadSelfAttention`.

    The block (for example a KerasHub `TransformerEncoder`, or the
    `ViTEncoder` of `ViTBackbone`, whose blocks hold its attention layers)
    is rebuilt from its config and copied with its weights, and each
    `keras.layers.MultiHeadAttention` that an attribute holds, inside the
    block at any depth, is replaced by the converted layer (see
    `from_keras_attention`), so the block's own `call` runs keras_attn
    attention. Calls go to the block unchanged. The config keeps the
    block's config and the attention options, so a model holding this layer
    saves to `.keras` and loads back with its attention.

    A layer whose class's `from_config` fails on entries of its config that
    the constructor does not take (KerasHub's `ViTPatchingAndEmbedding`
    writes the derived `num_patches` and `num_positions`) is rebuilt and
    saved without them; `convert_attention` copies such a layer in this
    wrapper even when it holds no attention. A layer that the remaining
    entries do not rebuild to the same config is refused with a
    `ValueError`.

    Args:
        layer: a built layer holding `keras.layers.MultiHeadAttention`
            sublayers as attributes (or a layer whose `from_config` fails,
            as above), or its serialized config.
        attention_options: dict of `MultiHeadSelfAttention` arguments for
            the converted attention layers.
        num_heads: dict `attention path inside the block -> number of heads`
            for converted attention layers with fewer heads than the block
            builds, as `keras_attn.pruning.prune_heads` leaves them (paths
            as `find_layers(block, ...)` keys them, for example
            `"self_attention_layer"`). Their weights are not copied, so it
            can only be given with a serialized `layer`.
        **kwargs: base layer arguments. The name defaults to the block's.
    """

    def __init__(
        self,
        layer: keras.layers.Layer | dict,
        attention_options: dict | None = None,
        num_heads: dict[str, int] | None = None,
        **kwargs,
    ):
        num_heads = _checked_num_heads(num_heads)
        weights = None
        if isinstance(layer, keras.layers.Layer):
            if not layer.built:
                raise ValueError(f"`layer` must be built. Received: layer={layer.name!r}")
            if num_heads:
                raise ValueError(
                    "`num_heads` leaves attention layers without the block's weights, so it "
                    f"needs a serialized `layer`. Received: num_heads={num_heads}"
                )
            weights = layer.get_weights()
            original, layer = layer, _serialized(layer)  # with its build config
        block = keras.saving.deserialize_keras_object(layer)  # built from it
        if weights is not None:
            _check_rebuilt(original, block)
        kwargs.setdefault("name", block.name)
        super().__init__(**kwargs)
        self.attention_options = {
            name: keras.saving.serialize_keras_object(value)
            for name, value in (attention_options or {}).items()
        }
        _check_options(self.attention_options)
        self.num_heads = num_heads
        if weights is not None:
            block.set_weights(weights)
        _replace_attention(block, self.attention_options, num_heads)
        self.layer = block
        self.built = True

    def call(self, *args, **kwargs) -> Any:
        return self.layer(*args, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "layer": _serialized(self.layer),
                "attention_options": self.attention_options,
                "num_heads": self.num_heads,
            }
        )
        return config


def _replace_attention(block, options, num_heads):
    """Replaces, in place, the Keras attention layers held inside `block`."""
    held = held_layers(block, keras.layers.MultiHeadAttention)
    unknown = sorted(set(num_heads) - set(held))
    if unknown:
        raise ValueError(
            f"`num_heads` must name attention layers inside the block, among {list(held)}. "
            f"Received: num_heads with {unknown}"
        )
    for path, (owner, attribute) in held.items():
        attention = getattr(owner, attribute)
        if path in num_heads:
            core = _built_core(attention, options, num_heads[path])
        else:
            core = from_keras_attention(attention, **options)
        replace_attributes(owner, {attribute: core})


def _checked_num_heads(num_heads):
    if num_heads is None:
        return {}
    if not isinstance(num_heads, dict):
        raise ValueError(
            f"`num_heads` must be a dict `path -> heads`. Received: num_heads={num_heads!r}"
        )
    return {path: check_int(f"num_heads[{path!r}]", count) for path, count in num_heads.items()}


def _serialized(layer):
    """`layer` serialized with its build config, so that deserializing it rebuilds it.

    A config that the layer's `from_config` fails on loses the entries that
    its constructor does not take (checked by `_check_rebuilt`).
    """
    serialized = keras.saving.serialize_keras_object(layer)
    if not _rebuilds_from_config(layer):
        arguments = _constructor_arguments(type(layer))
        serialized["config"] = {
            name: value for name, value in serialized["config"].items() if name in arguments
        }
    return serialized


def _rebuilds_from_config(layer):
    """Whether `layer.__class__.from_config(layer.get_config())` builds a layer (unbuilt, cheap)."""
    if isinstance(layer, keras.Model):
        return True  # a nested model: `clone_model` and saving rebuild it as a model
    try:
        layer.__class__.from_config(layer.get_config())
    except TypeError:  # entries that the constructor does not take
        return False
    return True


def _constructor_arguments(cls):
    """The names of the arguments that `cls(...)` takes, through `**kwargs` to its bases too."""
    names = set()
    variadic = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    for base in cls.__mro__:
        if "__init__" not in vars(base):
            continue
        parameters = inspect.signature(base.__init__).parameters.values()
        names |= {parameter.name for parameter in parameters if parameter.kind not in variadic}
        if all(parameter.kind != inspect.Parameter.VAR_KEYWORD for parameter in parameters):
            break
    return names


def _check_rebuilt(layer, block):
    """Refuses a copy whose config differs from `layer`'s (entries its constructor ignores)."""
    if block.get_config() != layer.get_config():
        raise ValueError(
            f"Layer {layer.name!r} cannot be copied: `{type(layer).__name__}.from_config` "
            "fails on its config (`keras.models.clone_model` fails on it too), and the "
            "entries of the config that its constructor takes build a different layer. Give "
            "the class a `from_config` that rebuilds it. Received: "
            f"config={layer.get_config()!r}"
        )


def _check_options(options):
    for name in SET_BY_WEIGHTS:
        if name in options:
            raise ValueError(
                f"`{name}` is set by the converted weights and cannot be given. "
                f"Received: {name}={options[name]!r}"
            )


def _core_config(layer):
    """The `MultiHeadSelfAttention` arguments that reproduce a built Keras attention layer."""
    if not isinstance(layer, keras.layers.MultiHeadAttention) or not layer.built:
        raise ValueError(
            f"`layer` must be a built `keras.layers.MultiHeadAttention`. Received: layer={layer!r}"
        )
    if not _is_convertible_type(type(layer)):
        raise ValueError(
            f"Attention layer {layer.name!r} cannot be converted: its class computes attention "
            "its own way; `MultiHeadSelfAttention` reproduces `keras.layers.MultiHeadAttention` "
            f"and KerasHub's `CachedMultiHeadAttention`. Received: {type(layer).__name__}"
        )
    config = layer.get_config()
    refused = [name for name, unset in REFUSED.items() if config.get(name) not in unset]
    refused += _unknown_options(layer, config)
    if refused:
        raise ValueError(
            f"Attention layer {layer.name!r} cannot be converted: `MultiHeadSelfAttention` "
            f"has no {', '.join(f'`{name}`' for name in refused)}. Received: "
            + ", ".join(f"{name}={config[name]!r}" for name in refused)
        )
    query, key, value = (layer.query_dense.kernel, layer.key_dense.kernel, layer.value_dense.kernel)
    output = layer.output_dense.kernel  # (num_heads, value_dim, output_dim)
    if not query.shape[0] == key.shape[0] == value.shape[0] or len(output.shape) != 3:
        raise ValueError(
            f"Attention layer {layer.name!r} cannot be converted: `MultiHeadSelfAttention` "
            "needs query, key and value of one size and one output axis. Received: kernel "
            f"shapes query={query.shape}, key={key.shape}, value={value.shape}, "
            f"output={output.shape}"
        )
    return {
        "num_heads": query.shape[1],
        "key_dim": query.shape[2],
        "value_dim": value.shape[2],
        "output_dim": output.shape[2] if output.shape[2] != query.shape[0] else None,
        "dropout": config["dropout"],
        "use_bias": config["use_bias"],
        "kernel_initializer": config["kernel_initializer"],
        "bias_initializer": config["bias_initializer"],
        "kernel_regularizer": config["kernel_regularizer"],
        "bias_regularizer": config["bias_regularizer"],
        "seed": config.get("seed"),
        "trainable": layer.trainable,
        "dtype": layer.dtype_policy,
        "autocast": layer.autocast,
        "name": layer.name,
    }


def _is_convertible_type(layer_type):
    """Whether `layer_type` is Keras' or KerasHub's cached `MultiHeadAttention`."""
    if layer_type is keras.layers.MultiHeadAttention:
        return True
    # KerasHub is optional: its class is recognised by name. Its `call` adds a key/value
    # cache, which `MultiHeadSelfAttention` refuses, and computes the same attention.
    package = layer_type.__module__.partition(".")[0]
    return package == "keras_hub" and layer_type.__name__ == "CachedMultiHeadAttention"


def _unknown_options(layer, config):
    """The config entries not known here and not at their constructor default.

    An option added to Keras' attention after this module was written is
    refused until the conversion handles it.
    """
    known = {*FROM_WEIGHTS, *CARRIED, *REFUSED, *KERNEL_CHOICES}
    defaults = {
        name: parameter.default
        for name, parameter in inspect.signature(type(layer).__init__).parameters.items()
    }
    return [
        name
        for name, value in config.items()
        if name not in known and (name not in defaults or value != defaults[name])
    ]
