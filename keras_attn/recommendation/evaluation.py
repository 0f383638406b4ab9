"""Full-ranking evaluation of a next-item model, and early stopping on it."""

import warnings
from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.recommendation.metrics import exclusion_mask, ranking_metrics, target_ranks
from keras_attn.utils.best_epoch_stopping import BestEpochStopping


def evaluate_full_ranking(
    model: keras.Model,
    inputs: Tensor,
    targets: Tensor,
    seen: Sequence[Tensor] | None,
    ks: Sequence[int] = (5, 10, 20),
    batch_size: int = 1024,
) -> dict[str, float]:
    """HR@k and NDCG@k of `model`, ranking every item for every query.

    Args:
        model: a Keras model from `(batch, max_sequence_length)` item ids to
            `(batch, num_items + 1)` next-item scores (column 0: padding).
        inputs: `(num_queries, max_sequence_length)` left-padded histories.
        targets: `(num_queries,)` the item to find.
        seen: list of 1D int arrays, items excluded from each ranking (the
            history), see `exclusion_mask`. `None` excludes only padding.
        ks: cut-offs.
        batch_size: int, queries scored at once.

    Returns:
        dict `{"HR@k": float, "NDCG@k": float}` for each `k`. A non-finite
        score ranks last (see `target_ranks`), so a diverged model scores 0.
    """
    ranks, _ = _full_ranking(model, inputs, targets, seen, batch_size)
    return ranking_metrics(ranks, ks)


def _full_ranking(model, inputs, targets, seen, batch_size=1024):
    """Ranks of the targets, and whether every candidate's score was finite."""
    ranks, finite = [], True
    for start in range(0, len(inputs), batch_size):
        stop = start + batch_size
        scores = keras.ops.convert_to_numpy(model(inputs[start:stop], training=False))
        rows_seen = seen[start:stop] if seen is not None else [[]] * len(scores)
        exclude = exclusion_mask(rows_seen, scores.shape[1])
        finite = finite and bool(np.isfinite(scores[~exclude]).all())
        ranks.append(target_ranks(scores, targets[start:stop], exclude))
    return np.concatenate(ranks), finite


class RankingEarlyStopping(BestEpochStopping):
    """Stops training when a validation ranking metric stops improving.

    After each epoch it ranks all items for the validation queries. A score
    counts as better only when it is strictly higher than the best so far
    (as in the official BSARec code). Training stops after `patience`
    epochs without improvement, and the best weights are restored at the end.

    An epoch in which a candidate item's validation score is not finite
    (NaN or infinite: the model diverged) is never the best one, whatever
    its metrics: it counts as an epoch without improvement and a warning
    names it. If no epoch had finite scores, `best_epoch` stays `None` and
    the weights are left as they are.

    Args:
        inputs: validation histories, `(num_queries, max_sequence_length)`.
        targets: validation targets, `(num_queries,)`.
        seen: list of item arrays excluded from each ranking.
        monitor: name of the metric to maximise, such as `"NDCG@20"`.
        patience: int, epochs without improvement before stopping.
        ks: cut-offs of the computed metrics.
        verbose: bool, print the metrics after each epoch.

    Attributes:
        history: list of the metric dicts, one per epoch.
        best_epoch: 0-based epoch of the best score, `None` when no epoch
            had finite scores.
        best_score: the best `monitor` value.
        non_finite_epochs: list of the 0-based epochs whose scores were not
            finite.
    """

    def __init__(
        self,
        inputs: Tensor,
        targets: Tensor,
        seen: Sequence[Tensor] | None,
        monitor: str = "NDCG@20",
        patience: int = 10,
        ks: Sequence[int] = (5, 10, 20),
        verbose: bool = False,
    ):
        super().__init__(patience)
        self.inputs, self.targets, self.seen = inputs, targets, seen
        self.monitor = monitor
        self.ks = ks
        self.verbose = verbose

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        super().on_train_begin(logs)
        self.history = []
        self.non_finite_epochs = []

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        ranks, finite = _full_ranking(self.model, self.inputs, self.targets, self.seen)
        metrics = ranking_metrics(ranks, self.ks)
        self.history.append(metrics)
        if logs is not None:
            logs.update({f"val_{name}": value for name, value in metrics.items()})
        if self.verbose:
            print(f"epoch {epoch + 1}: " + ", ".join(f"{k} {v:.4f}" for k, v in metrics.items()))
        if not finite:
            self.non_finite_epochs.append(epoch)
            warnings.warn(
                f"Epoch {epoch + 1} gave non-finite validation scores (NaN or inf): the model "
                "diverged, and this epoch is never kept as the best one.",
                stacklevel=2,
            )
        self.count_epoch(epoch, metrics[self.monitor] if finite else None)
