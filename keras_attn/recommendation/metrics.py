"""Full-ranking metrics of next-item recommendation: HR@K and NDCG@K."""

from collections.abc import Sequence

import numpy as np

from keras_attn._typing import Tensor
from keras_attn.recommendation.data import PADDING_ITEM


def exclusion_mask(seen: Sequence[Tensor], num_items: int) -> np.ndarray:
    """Boolean `(len(seen), num_items)`: True for items removed from the ranking.

    The padding item 0 and every item of `seen[row]` are excluded, as the
    official BSARec evaluation removes the items a user has already seen.

    Args:
        seen: list of 1D int arrays, the history of each row.
        num_items: int, number of score columns (items + padding).

    Returns:
        Boolean array of shape `(len(seen), num_items)`.
    """
    mask = np.zeros((len(seen), num_items), bool)
    mask[:, PADDING_ITEM] = True
    for row, items in enumerate(seen):
        mask[row, np.asarray(items, np.int64)] = True
    return mask


def target_ranks(scores: Tensor, targets: Tensor, exclude: Tensor | None = None) -> np.ndarray:
    """0-based rank of each target among all candidate items.

    The rank counts the other candidates whose score is at least the
    target's: ties count against the target, so a model that scores every
    item the same ranks each target last, never first. A non-finite score
    (NaN, `inf` or `-inf`, the scores of a diverged model) ranks below
    every finite score, and ties with the other non-finite ones: a
    non-finite target ranks last and is never a hit, and a non-finite
    other item is never ahead of a finite target. Excluded items are not
    candidates; the target itself always is.

    Args:
        scores: `(batch, num_items)` float array.
        targets: `(batch,)` int array of target columns, each from 0 to
            `num_items - 1`.
        exclude: optional boolean `(batch, num_items)` array, True for items
            that are not candidates.

    Returns:
        int64 array of shape `(batch,)`.

    Example:

    >>> target_ranks(np.array([[0.1, 0.9, 0.5, 0.5]]), np.array([2])).tolist()
    [2]
    >>> target_ranks(np.array([[np.nan, 0.9, np.inf, 0.5]]), np.array([3])).tolist()
    [1]
    """
    scores = np.asarray(scores, np.float64)
    targets = _checked_targets(targets, scores.shape)
    if exclude is not None and np.shape(exclude) != scores.shape:
        raise ValueError(
            f"`exclude` must have the shape of `scores`, {scores.shape}. "
            f"Received: exclude.shape={np.shape(exclude)}"
        )
    scores = np.where(np.isfinite(scores), scores, -np.inf)  # non-finite ranks last
    rows = np.arange(len(scores))
    target_scores = scores[rows, targets][:, None]  # (batch, 1)
    ahead = scores >= target_scores  # (batch, num_items)
    ahead[rows, targets] = False
    if exclude is not None:
        ahead &= ~np.asarray(exclude, bool)
    return ahead.sum(axis=1).astype(np.int64)


def _checked_targets(targets, scores_shape):
    """`targets` as an int array, one column of `(batch, num_items)` scores per row."""
    targets = np.asarray(targets)
    if len(scores_shape) != 2:
        raise ValueError(
            f"`scores` must be (batch, num_items). Received: scores.shape={scores_shape}"
        )
    batch, num_items = scores_shape
    if targets.shape != (batch,):
        raise ValueError(
            f"`targets` must hold one column per row of `scores`, shape ({batch},). "
            f"Received: targets.shape={targets.shape}"
        )
    if not np.issubdtype(targets.dtype, np.integer):
        raise ValueError(
            f"`targets` must hold integer columns. Received: targets.dtype={targets.dtype}"
        )
    if targets.size == 0:
        return targets
    # A negative column would index from the end: `-1` would rank the last item.
    low, high = targets.min(), targets.max()
    if low < 0 or high >= num_items:
        label, value = ("min", low) if low < 0 else ("max", high)
        raise ValueError(
            f"`targets` must hold columns from 0 to {num_items - 1} of `scores`. "
            f"Received: {label}(targets)={value}"
        )
    return targets


def hit_rate(ranks: Tensor, k: int) -> float:
    """HR@k: the share of targets ranked in the top `k` (rank < k)."""
    return float(np.mean(np.asarray(ranks) < k))


def ndcg(ranks: Tensor, k: int) -> float:
    """NDCG@k with one relevant item: mean of `1 / log2(rank + 2)` over top-`k` targets."""
    ranks = np.asarray(ranks, np.float64)
    return float(np.mean(np.where(ranks < k, 1.0 / np.log2(ranks + 2.0), 0.0)))


def ranking_metrics(ranks: Tensor, ks: Sequence[int] = (5, 10, 20)) -> dict[str, float]:
    """`{"HR@k": ..., "NDCG@k": ...}` for each `k` in `ks`."""
    metrics = {}
    for k in ks:
        metrics[f"HR@{k}"] = hit_rate(ranks, k)
        metrics[f"NDCG@{k}"] = ndcg(ranks, k)
    return metrics
