"""Pruning curves, iterative pruning with re-scoring, and single-head ablations.

Michel et al. (2019), "Are sixteen heads really better than one?"
(https://arxiv.org/abs/1905.10650). Heads are named as `attention_layers`
names them; the number of heads of each layer is the length of its scores,
so any model works, whatever its layers are called or how many heads each has.
"""

from collections.abc import Callable, Iterable, Mapping
from typing import Any

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.pruning.attention_layers import attention_layers
from keras_attn.pruning.prune_heads import prune_heads
from keras_attn.pruning.select_heads import select_heads


def head_mask_array(model: keras.Model, removed: Mapping[str, Iterable[int]]) -> np.ndarray:
    """The `(layers, heads)` 0/1 mask of a model's heads with `removed` set to 0.

    Rows follow `attention_layers(model)`, the order in which a model such as
    `keras_attn.models.build_bert_encoder(head_mask=True)` reads its
    `"head_mask"` input.

    Args:
        model: a built Keras model whose attention layers all have the same
            number of heads.
        removed: dict `layer name -> head indices` (as from `select_heads`).

    Returns:
        float32 numpy array `(layers, heads)`.

    Example:

    >>> x = keras.Input((4, 8))
    >>> y = MultiHeadSelfAttention(3, 4, name="first")(x)
    >>> model = keras.Model(x, MultiHeadSelfAttention(3, 4, name="second")(y))
    >>> head_mask_array(model, {"second": [0, 2]}).tolist()
    [[1.0, 1.0, 1.0], [0.0, 1.0, 0.0]]
    """
    layers = attention_layers(model)
    counts = {layer.num_heads for layer in layers.values()}
    if len(counts) != 1:
        raise ValueError(
            "Every attention layer must have the same number of heads for one mask. "
            f"Received: num_heads {sorted(counts)}"
        )
    unknown = sorted(set(removed) - set(layers))
    if unknown:
        raise ValueError(
            f"`removed` must name attention layers of `model`, one of {list(layers)}. "
            f"Received: removed with {unknown}"
        )
    mask = np.ones((len(layers), counts.pop()), "float32")  # (layers, heads)
    for row, name in enumerate(layers):
        mask[row, list(removed.get(name, []))] = 0.0
    return mask


def pruning_curve(
    evaluate: Callable[[dict[str, list[int]]], Any],
    scores: Mapping[str, Tensor],
    fractions: Iterable[float],
    min_heads_per_layer: int = 1,
) -> list[Any]:
    """Quality after removing each fraction of the heads, lowest scores first.

    Args:
        evaluate: callable `evaluate(removed)` returning the quality of the
            model with the heads in `removed` (a dict as from `select_heads`)
            masked or pruned.
        scores: dict `layer name -> (num_heads,) array`; `-importance`
            prunes the most important first, random numbers in a random order.
        fractions: iterable of floats in [0, 1), the share of all heads
            removed; the count is rounded.
        min_heads_per_layer: int, heads each layer keeps (see `select_heads`).

    Returns:
        list of `evaluate`'s results, one per fraction.

    Example:

    >>> scores = {"a": np.array([0.1, 0.9]), "b": np.array([0.5, 0.2])}
    >>> pruning_curve(lambda removed: removed, scores, [0.0, 0.5])
    [{}, {'a': [0], 'b': [1]}]
    """
    total = sum(len(score) for score in scores.values())
    return [
        evaluate(select_heads(scores, round(fraction * total), min_heads_per_layer))
        for fraction in fractions
    ]


def iterative_pruning(
    model: keras.Model,
    scores: Mapping[str, Tensor],
    fractions: Iterable[float],
    rescore: Callable[[keras.Model], Mapping[str, Tensor]],
    evaluate: Callable[[dict[str, list[int]]], Any],
    min_heads_per_layer: int = 1,
) -> tuple[list[Any], list[dict[str, list[int]]]]:
    """Prunes step by step, scoring the remaining heads again before each step.

    The first step removes the lowest-scored heads by `scores`. Before every
    later step, the heads already removed are really pruned (`prune_heads`),
    `rescore` scores the smaller model, and its scores are mapped back to the
    heads of `model` (removed heads score `-inf`, so they stay removed); the
    next `fraction` of all heads is then chosen from them.

    Args:
        model: a functional Keras model (see `prune_heads`).
        scores: dict `layer name -> (num_heads,) array`, the scores of `model`.
        fractions: increasing floats in [0, 1), the share of all heads removed
            after each step.
        rescore: callable `rescore(pruned_model)` returning its scores keyed
            as `attention_layers(pruned_model)` names its layers (for example
            a `head_importance` call) or with the keys of `scores`. The two
            name the same layers in the same order; they may differ where
            `prune_heads` converted a block (a KerasHub backbone's).
        evaluate: callable `evaluate(removed)`, the quality with the heads in
            `removed` (of `model`) masked or pruned.
        min_heads_per_layer: int, heads each layer keeps.

    Returns:
        `(qualities, removed)`: the list of `evaluate`'s results and the
        list of removed-head dicts, one of each per fraction.

    Example:

    ```python
    qualities, removed = iterative_pruning(
        classifier, scores, [0.0, 0.1, 0.2],
        rescore=lambda pruned: head_importance(pruned, batches, loss),
        evaluate=lambda removed: accuracy(classifier, removed),
    )
    ```
    """
    total = sum(len(score) for score in scores.values())
    removed, qualities, steps = {}, [], []
    for fraction in fractions:
        current = scores
        if removed:
            pruned = prune_heads(model, removed)
            pruned_scores = _named_as_in(model, pruned, rescore(pruned))
            current = scores_of_kept_heads(pruned_scores, removed, scores)
        removed = select_heads(current, round(fraction * total), min_heads_per_layer)
        steps.append(removed)
        qualities.append(evaluate(removed))
    return qualities, steps


def _named_as_in(model, pruned, scores):
    """`scores` of `pruned`'s attention layers, keyed by the names of the same layers in `model`.

    `prune_heads` keeps the attention layers in their order, but a block it
    converts on the way may name its attention by its path inside the
    `ConvertedAttentionBlock`.
    """
    names = dict(zip(attention_layers(pruned), attention_layers(model), strict=True))
    return {names.get(name, name): score for name, score in scores.items()}


def scores_of_kept_heads(
    pruned_scores: Mapping[str, Tensor],
    removed: Mapping[str, Iterable[int]],
    scores: Mapping[str, Tensor],
) -> dict[str, np.ndarray]:
    """Maps scores of a pruned model back to the head indices of the original.

    Args:
        pruned_scores: dict `layer name -> (kept heads,) array`, scores of a
            model pruned by `prune_heads(model, removed)`.
        removed: dict `layer name -> removed head indices`.
        scores: dict `layer name -> (num_heads,) array` of the original model
            (only the number of heads of each layer is read).

    Returns:
        dict `layer name -> (num_heads,) array`; removed heads score `-inf`,
        so that `select_heads` keeps them removed.

    Example:

    >>> scores_of_kept_heads({"a": np.array([0.5, 0.2])}, {"a": [0]}, {"a": np.zeros(3)})
    {'a': array([-inf,  0.5,  0.2])}
    """
    mapped = {}
    for name, pruned_score in pruned_scores.items():
        num_heads = len(scores[name])
        kept = [head for head in range(num_heads) if head not in removed.get(name, [])]
        score = np.full(num_heads, -np.inf)
        score[kept] = pruned_score
        mapped[name] = score
    return mapped


def single_head_ablations(
    model: keras.Model,
    evaluate: Callable[[dict[str, list[int]]], Any],
    layers: Iterable[str | int] | None = None,
) -> dict[str, list[Any]]:
    """The quality with each single head removed, layer by layer.

    Args:
        model: a built Keras model.
        evaluate: callable `evaluate(removed)`, as for `pruning_curve`.
        layers: optional iterable of attention layer names, or of indices into
            `attention_layers(model)`; all layers by default.

    Returns:
        dict `layer name -> [evaluate({name: [head]}) for each head]`.

    Example:

    >>> x = keras.Input((4, 8))
    >>> model = keras.Model(x, MultiHeadSelfAttention(2, 4, name="attention")(x))
    >>> single_head_ablations(model, lambda removed: removed)
    {'attention': [{'attention': [0]}, {'attention': [1]}]}
    """
    found = attention_layers(model)
    names = list(found) if layers is None else [_layer_name(found, layer) for layer in layers]
    return {
        name: [evaluate({name: [head]}) for head in range(found[name].num_heads)] for name in names
    }


def _layer_name(found, layer):
    if isinstance(layer, (int, np.integer)) and not isinstance(layer, bool):
        return list(found)[layer]
    if layer not in found:
        raise ValueError(
            f"`layers` must name attention layers of the model, one of {list(found)}. "
            f"Received: layers with {layer!r}"
        )
    return layer
