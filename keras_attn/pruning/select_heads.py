"""Global choice of the heads to prune (Michel et al., 2019)."""

from collections.abc import Mapping

import numpy as np

from keras_attn._typing import Tensor


def select_heads(
    scores: Mapping[str, Tensor], count: int, min_heads_per_layer: int = 1
) -> dict[str, list[int]]:
    """Picks the `count` lowest-scored heads over all layers.

    The paper prunes globally in increasing order of (layer-normalised)
    importance; with `min_heads_per_layer`, a head is skipped when removing it
    would leave its layer with fewer heads, and the next lowest is taken.
    Ties are broken by layer order, then head index. Other orderings are
    other scores: `-importance` prunes the most important heads first, random
    numbers give a random order.

    Args:
        scores: dict `layer name -> (num_heads,) array`, as returned by
            `head_importance`.
        count: int, number of heads to remove.
        min_heads_per_layer: int, heads each layer keeps at least (0 allows
            emptying a layer).

    Returns:
        dict `layer name -> sorted list of head indices to remove` (layers
        without removed heads are left out), ready for `prune_heads`.

    Example:

    >>> select_heads({"a": np.array([0.5, 0.1]), "b": np.array([0.3, 0.9])}, 2)
    {'a': [1], 'b': [0]}
    """
    total = sum(len(score) for score in scores.values())
    allowed = total - min_heads_per_layer * len(scores)
    if not isinstance(count, (int, np.integer)) or not 0 <= count <= allowed:
        raise ValueError(
            f"`count` must be an integer in [0, {allowed}] for {total} heads with "
            f"`min_heads_per_layer={min_heads_per_layer}`. Received: count={count!r}"
        )
    order = sorted(
        (float(score), layer_index, head, name)
        for layer_index, (name, layer_scores) in enumerate(scores.items())
        for head, score in enumerate(np.asarray(layer_scores))
    )
    removed = {name: [] for name in scores}
    remaining = count
    for _, _, head, name in order:
        if remaining == 0:
            break
        if len(scores[name]) - len(removed[name]) > min_heads_per_layer:
            removed[name].append(head)
            remaining -= 1
    return {name: sorted(heads) for name, heads in removed.items() if heads}
