"""Real head pruning of Michel et al. (2019), "Are sixteen heads really better
than one?" (https://arxiv.org/abs/1905.10650).
"""

from collections.abc import Iterable, Mapping

import keras
from keras import ops

from keras_attn.interop.attention_conversion import (
    ConvertedAttentionBlock,
    assign_copy,
    rebuilt_layer,
)
from keras_attn.interop.model_layers import (
    ATTENTION_TYPES,
    find_layers,
    held_layers,
    is_graph_model,
)
from keras_attn.layers import MultiHeadSelfAttention, TransformerBlock
from keras_attn.pruning.attention_layers import attention_layers


def prune_heads(model: keras.Model, heads: Mapping[str, Iterable[int]]) -> keras.Model:
    """Returns a copy of a functional model with attention heads removed.

    Each attention layer named in `heads` is rebuilt with fewer heads: the
    query, key and value kernels `([kernel_size,] dim, heads, head_dim)` and
    their biases keep the columns of the kept heads, the output kernel
    `(heads, head_dim, dim)` keeps their rows. The pruned model computes
    exactly what the original computes with those heads masked to zero, with
    less work and fewer parameters. Every other layer is copied with its
    weights; the original model is left untouched, also when the call fails.

    The attention layers are `keras_attn.layers.MultiHeadSelfAttention` and
    `keras.layers.MultiHeadAttention` (KerasHub's `CachedMultiHeadAttention`
    included) that are:

    - layers of a functional model, also of a functional or `Sequential`
      model nested in it (an encoder called by a classifier), which is then
      pruned the same way; a Keras attention layer stays a
      `keras.layers.MultiHeadAttention`;
    - the attention of a `TransformerBlock` layer (as in
      `build_bert_encoder`, `build_vision_transformer` and `build_t2t_vit`),
      which is rebuilt around the smaller attention;
    - Keras attention held inside another layer: the blocks of KerasHub's
      `BertBackbone`, `GPT2Backbone` (`TransformerEncoder`,
      `TransformerDecoder`) and `ViTBackbone` (its `ViTEncoder`), also in a
      KerasHub task such as `BertTextClassifier`, or the
      `ConvertedAttentionBlock`s of a model from
      `keras_attn.interop.convert_attention`. Such a block derives its head
      size from its head count, so it cannot be rebuilt with fewer heads: it
      is converted (see `convert_attention`) and comes back as a
      `ConvertedAttentionBlock` whose `MultiHeadSelfAttention` keeps the
      remaining heads and whose config records their number, so the pruned
      model saves as `.keras` and reloads with them. A KerasHub backbone or
      task then comes back as a functional `keras.Model` with the same
      inputs and outputs (its class's config has one `num_heads` for every
      layer), in which only the pruned blocks are converted.

    A `head_mask` passed to a pruned layer or `TransformerBlock` keeps the
    entries of the kept heads. The attention of other layers (keras_attn's
    `TokenTransformer`) and of subclassed models cannot be rebuilt: naming
    one raises a `ValueError` that names it, before anything is built; mask
    such heads instead (`head_mask_array`, or `keras_attn.interop.gate_heads`).

    Args:
        model: a functional `keras.Model` (a KerasHub backbone or task
            included) or a `keras.Sequential` model.
        heads: dict `attention layer name -> iterable of head indices to
            remove`, named as `attention_layers(model)` names them (for
            example `"layer_0/attention"` in a block named `layer_0`,
            `"encoder/layer_0/attention"` in a nested model named
            `encoder`, or `"transformer_layer_0/self_attention_layer"` in a
            KerasHub `BertBackbone`). Each layer keeps at least one head; use
            `select_heads` to choose.

    Returns:
        A new model of the same kind (functional or `Sequential`) with the
        same inputs and outputs, whose attention layers come in the same
        order.

    Example:

    ```python
    pruned = prune_heads(model, {"layer_0/attention": [0, 3], "layer_5/attention": [1]})
    pruned.get_layer("layer_0").attention.num_heads  # 10
    ```

    References:
        - [Michel et al., 2019](https://arxiv.org/abs/1905.10650)
    """
    if not is_graph_model(model):
        raise ValueError(
            "`model` must be a functional keras.Model or a keras.Sequential model. "
            f"Received: model={type(model).__name__}"
        )
    return _prune(model, _kept_heads(model, heads))


def _prune(model, kept):
    """`model` rebuilt.

    `kept`: nested model name -> its `kept`; layer name -> `{path of an
    attention layer inside it: kept heads}` (`""` for an attention layer
    itself), for the layers rebuilt with fewer heads.
    """
    sources = {
        name: _rebuildable(model.get_layer(name))
        for name in kept
        if not is_graph_model(model.get_layer(name))
    }

    def clone_layer(operation):
        if not isinstance(operation, keras.layers.Layer) or isinstance(
            operation, keras.layers.InputLayer
        ):
            return operation  # Stateless operations are shared.
        if operation.name in sources:
            return _with_fewer_heads(sources[operation.name], kept[operation.name])
        if operation.name in kept:
            return _prune(operation, kept[operation.name])
        return rebuilt_layer(operation)

    def call_layer(layer, *args, **kwargs):
        takes_head_mask = isinstance(layer, (*ATTENTION_TYPES, TransformerBlock))
        if layer.name in sources and takes_head_mask and kwargs.get("head_mask") is not None:
            (heads,) = kept[layer.name].values()
            # (batch, heads) -> (batch, kept heads)
            kwargs["head_mask"] = ops.take(kwargs["head_mask"], heads, axis=-1)
        return layer(*args, **kwargs)

    # A Sequential model passes no head mask, and `clone_model` takes no `call_function` for it.
    call = None if isinstance(model, keras.Sequential) else call_layer
    pruned = keras.models.clone_model(model, clone_function=clone_layer, call_function=call)
    for layer in pruned.layers:
        if layer.name in sources:
            _copy_weights(sources[layer.name], layer, kept[layer.name])
        elif layer.weights and layer.name not in kept:
            layer.set_weights(model.get_layer(layer.name).get_weights())
    return pruned


def _kept_heads(model, heads):
    """The `kept` of `_prune`: only the layers, and nested models, that lose heads."""
    found = attention_layers(model)
    prunable = _prunable_layers(model)
    kept = {}
    for name, removed in heads.items():
        if name not in found:
            raise ValueError(
                f"`heads` must name attention layers of `model`, one of {list(found)}. "
                f"Received: heads with {name!r}"
            )
        if id(found[name]) not in prunable:
            raise ValueError(
                f"`prune_heads` cannot rebuild the attention layer {name!r} with fewer "
                "heads: it must be a layer of a functional or Sequential model (nested ones "
                "included), or held inside a TransformerBlock or a layer holding Keras "
                f"attention, not in a {type(_owner_of(model, name)).__name__}. Mask its heads "
                f"instead. Received: heads with {name!r}"
            )
        path, inside, num_heads = prunable[id(found[name])]
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
            target = kept
            for step in path:
                target = target.setdefault(step, {})
            target[inside] = [head for head in range(num_heads) if head not in removed]
    return kept


def _prunable_layers(model, prefix=()):
    """`id(attention layer) -> (path of layer names to the rebuilt layer, path inside it, heads)`.

    The rebuilt layer is the attention layer itself (path inside it `""`) or
    the layer holding it, a layer of `model` or of a model nested in it.
    """
    found = {}
    for layer in model.layers:
        path = (*prefix, layer.name)
        if is_graph_model(layer):
            found.update(_prunable_layers(layer, path))
            continue
        for inside, attention in _held_attention(layer).items():
            found[id(attention)] = (path, inside, attention.num_heads)
    return found


def _held_attention(layer):
    """`{path inside layer: attention layer}` of the attention `prune_heads` can rebuild in it."""
    if isinstance(layer, ATTENTION_TYPES):
        return {"": layer}
    if isinstance(layer, TransformerBlock):
        attention = layer.attention
        return {"attention": attention} if isinstance(attention, ATTENTION_TYPES) else {}
    if isinstance(layer, ConvertedAttentionBlock):
        layer, types = layer.layer, MultiHeadSelfAttention  # the converted ones
    else:
        types = keras.layers.MultiHeadAttention  # converted on the way
    return {path: getattr(owner, name) for path, (owner, name) in held_layers(layer, types).items()}


def _rebuildable(layer):
    """`layer`, or a layer holding Keras attention converted, as `_with_fewer_heads` takes it."""
    if isinstance(layer, (*ATTENTION_TYPES, TransformerBlock, ConvertedAttentionBlock)):
        return layer
    return ConvertedAttentionBlock(layer)


def _with_fewer_heads(layer, kept):
    """A new `layer` (of `_rebuildable`) with `kept` heads, unbuilt or with new weights."""
    config = layer.get_config()
    if isinstance(layer, ConvertedAttentionBlock):
        config["num_heads"] = {
            **config["num_heads"],
            **{inside: len(heads) for inside, heads in kept.items()},
        }
    else:
        (heads,) = kept.values()
        _set_num_heads(config, layer, len(heads))
    return layer.__class__.from_config(config)


def _owner_of(model, name):
    """The layer that holds the attention layer at path `name` (for error messages)."""
    owner = name.rpartition("/")[0]
    return find_layers(model, keras.layers.Layer)[owner] if owner else model


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
    sources, targets = _held_attention(original), _held_attention(pruned)
    attention_weights = {id(weight) for layer in targets.values() for weight in layer.weights}
    for original_weight, pruned_weight in zip(original.weights, pruned.weights, strict=True):
        if id(pruned_weight) not in attention_weights:
            assign_copy(pruned_weight, original_weight)
    for inside, target in targets.items():
        source = sources[inside]
        _copy_kept_heads(source, target, kept.get(inside, list(range(source.num_heads))))


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
