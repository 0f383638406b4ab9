"""Real head pruning of Michel et al. (2019), "Are sixteen heads really better
than one?" (https://arxiv.org/abs/1905.10650).
"""

from collections.abc import Iterable, Mapping

import keras
from keras import ops

from keras_attn.layers import TransformerBlock
from keras_attn.pruning.attention_layers import attention_layers
from keras_attn.utils.model_layers import ATTENTION_TYPES, find_layers


def prune_heads(model: keras.Model, heads: Mapping[str, Iterable[int]]) -> keras.Model:
    """Returns a copy of a functional model with attention heads removed.

    Each attention layer named in `heads` is rebuilt with fewer heads: the
    query, key and value kernels `([kernel_size,] dim, heads, head_dim)` and
    their biases keep the columns of the kept heads, the output kernel
    `(heads, head_dim, dim)` keeps their rows. The pruned model computes
    exactly what the original computes with those heads masked to zero, with
    less work. Every other layer is copied with its weights; the original
    model is left untouched. Works with `keras_attn.layers.MultiHeadSelfAttention`
    and `keras.layers.MultiHeadAttention` (which stays a
    `keras.layers.MultiHeadAttention`) that are layers of a functional model
    or the attention of a `TransformerBlock` layer of it (as in
    `build_bert_encoder`, `build_vision_transformer` and `build_t2t_vit`),
    also inside a functional or `Sequential` model nested in the model (an
    encoder called by a classifier), which is then pruned the same way. A block is rebuilt
    around the smaller attention. A `head_mask` passed to a pruned layer or
    block keeps the entries of the kept heads.

    Other attention layers cannot be rebuilt from their config with fewer
    heads: those inside other layers (the `TransformerEncoder` and
    `TransformerDecoder` of KerasHub's backbones derive their head size from
    `num_heads`, so a pruned copy would not reload) and those of subclassed
    models. Naming one raises a `ValueError` that names it; mask such heads
    instead (`head_mask_array`, or `keras_attn.utils.gate_heads`).

    Args:
        model: a functional `keras.Model` or a `keras.Sequential` model.
        heads: dict `attention layer name -> iterable of head indices to
            remove`, named as `attention_layers(model)` names them (for
            example `"layer_0/attention"` in a block named `layer_0`, or
            `"encoder/layer_0/attention"` in a nested model named
            `encoder`). Each layer keeps at least one head; use
            `select_heads` to choose.

    Returns:
        A new model of the same kind (functional or `Sequential`) with the
        same inputs and outputs.

    Example:

    ```python
    pruned = prune_heads(model, {"layer_0/attention": [0, 3], "layer_5/attention": [1]})
    pruned.get_layer("layer_0").attention.num_heads  # 10
    ```

    References:
        - [Michel et al., 2019](https://arxiv.org/abs/1905.10650)
    """
    if not _is_functional(model):
        raise ValueError(
            "`model` must be a functional keras.Model or a keras.Sequential model. "
            f"Received: model={type(model).__name__}"
        )
    return _prune(model, _kept_heads(model, heads))


def _is_functional(model):
    """A functional or `Sequential` model: one `clone_model` can rebuild layer by layer."""
    return isinstance(model, keras.Sequential) or (
        isinstance(model, keras.Model) and hasattr(model, "_nodes_by_depth")
    )


def _prune(model, kept):
    """`model` rebuilt; `kept`: layer name -> kept heads, or nested model name -> its `kept`."""

    def clone_layer(operation):
        if not isinstance(operation, keras.layers.Layer) or isinstance(
            operation, keras.layers.InputLayer
        ):
            return operation  # Stateless operations are shared.
        if isinstance(kept.get(operation.name), dict):
            return _prune(operation, kept[operation.name])
        config = operation.get_config()
        if operation.name in kept:
            _set_num_heads(config, operation, len(kept[operation.name]))
        return operation.__class__.from_config(config)

    def call_layer(layer, *args, **kwargs):
        if isinstance(kept.get(layer.name), list) and kwargs.get("head_mask") is not None:
            # (batch, heads) -> (batch, kept heads)
            kwargs["head_mask"] = ops.take(kwargs["head_mask"], kept[layer.name], axis=-1)
        return layer(*args, **kwargs)

    # A Sequential model passes no head mask, and `clone_model` takes no `call_function` for it.
    call = None if isinstance(model, keras.Sequential) else call_layer
    pruned = keras.models.clone_model(model, clone_function=clone_layer, call_function=call)
    for layer in pruned.layers:
        if layer.weights and not isinstance(kept.get(layer.name), dict):
            _copy_weights(model.get_layer(layer.name), layer, kept.get(layer.name))
    return pruned


def _kept_heads(model, heads):
    """The `kept` of `_prune`: only the layers, and nested models, that lose heads."""
    layers = _prunable_layers(model)
    found = attention_layers(model)
    kept = {}
    for name, removed in heads.items():
        if name not in layers:
            if name in found:
                raise ValueError(
                    f"`prune_heads` cannot rebuild the attention layer {name!r} with fewer "
                    "heads: it must be a layer of a functional or Sequential model (nested ones "
                    "included) or the attention of a TransformerBlock layer, not of a "
                    f"{type(_owner_of(model, name)).__name__}. Mask its heads instead. "
                    f"Received: heads with {name!r}"
                )
            raise ValueError(
                "`heads` must name attention layers of `model` in its functional graphs or "
                f"their TransformerBlocks, one of {sorted(layers)}. Received: heads with {name!r}"
            )
        path, num_heads = layers[name]
        removed = {int(head) for head in removed}
        if not removed <= set(range(num_heads)):
            raise ValueError(
                f"Head indices of {name!r} must be in [0, {num_heads}). "
                f"Received: heads[{name!r}]={sorted(removed)}"
            )
        if len(removed) == num_heads:
            raise ValueError(
                f"Each layer must keep at least one head. "
                f"Received: heads[{name!r}] removes all {num_heads} heads"
            )
        if removed:
            *models, owner = path
            target = kept
            for nested in models:
                target = target.setdefault(nested, {})
            target[owner] = [head for head in range(num_heads) if head not in removed]
    return kept


def _prunable_layers(model, prefix=()):
    """`attention_layers` name -> `(path of layer names to the rebuilt layer, num_heads)`.

    The rebuilt layer is the attention layer or its `TransformerBlock`, a
    layer of `model` or of a functional model nested in it.
    """
    found = {}
    for layer in model.layers:
        path = (*prefix, layer.name)
        name = "/".join(path)
        attention = _attention_of(layer)
        if isinstance(attention, ATTENTION_TYPES):
            key = name if attention is layer else f"{name}/{attention.name}"
            found[key] = (path, attention.num_heads)
        elif _is_functional(layer):
            found.update(_prunable_layers(layer, path))
    return found


def _owner_of(model, name):
    """The layer that holds the attention layer at path `name` (for error messages)."""
    owner = name.rpartition("/")[0]
    return find_layers(model, keras.layers.Layer)[owner] if owner else model


def _attention_of(layer):
    return layer.attention if isinstance(layer, TransformerBlock) else layer


def _set_num_heads(config, layer, num_heads):
    """Sets `num_heads` in `layer`'s config (an attention layer or a `TransformerBlock`)."""
    config["num_heads"] = num_heads
    if not isinstance(layer, TransformerBlock):
        return
    if config["attention"]:  # the block's given attention layer, serialized
        config["attention"]["config"]["num_heads"] = num_heads
    else:  # the default attention, whose head size would follow `num_heads`
        config["key_dim"] = layer.attention.key_dim


def _copy_weights(original, pruned, kept):
    """Copies `original`'s weights into `pruned`, its attention's for the `kept` heads only."""
    if kept is None:
        pruned.set_weights(original.get_weights())
        return
    source, target = _attention_of(original), _attention_of(pruned)
    attention_weights = {id(weight) for weight in target.weights}
    for original_weight, pruned_weight in zip(original.weights, pruned.weights, strict=True):
        if id(pruned_weight) not in attention_weights:
            pruned_weight.assign(original_weight)
    _copy_kept_heads(source, target, kept)


def _copy_kept_heads(original, pruned, kept):
    for source, target in zip(_projections(original), _projections(pruned), strict=True):
        is_output = source is original.output_dense
        kernel = ops.convert_to_numpy(source.kernel)
        # ([kernel_size,] dim, heads, head_dim) keeps columns; (heads, head_dim, dim) keeps rows.
        target.kernel.assign(kernel[kept] if is_output else kernel[..., kept, :])
        if source.bias is not None:
            bias = ops.convert_to_numpy(source.bias)
            target.bias.assign(bias if is_output else bias[kept])  # (heads, head_dim) or (dim,)


def _projections(layer):
    return (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense)
