import math

import keras
import numpy as np
import pytest

from keras_attn.recommendation import (
    RankingEarlyStopping,
    evaluate_full_ranking,
    exclusion_mask,
    hit_rate,
    ndcg,
    ranking_metrics,
    target_ranks,
)


def test_target_ranks_by_hand():
    scores = np.array(
        [
            [0.0, 0.9, 0.1, 0.5, 0.3],  # target 3: only item 1 is higher -> rank 1
            [0.0, 0.2, 0.2, 0.2, 0.1],  # target 2: ties with items 1 and 3 count -> rank 2
            [0.0, 0.1, 0.2, 0.3, 0.4],  # target 4 is the best -> rank 0
        ]
    )
    targets = np.array([3, 2, 4])
    assert target_ranks(scores, targets).tolist() == [1, 2, 0]


def test_excluded_items_are_not_candidates_but_the_target_always_is():
    scores = np.array([[0.0, 0.9, 0.1, 0.5, 0.3]])
    exclude = np.array([[True, True, False, True, False]])  # padding, item 1 and the target 3
    assert target_ranks(scores, np.array([3]), exclude).tolist() == [0]
    assert target_ranks(scores, np.array([2]), exclude).tolist() == [1]  # item 4 is ahead


def test_constant_scores_rank_the_target_last():
    scores = np.zeros((2, 6))
    assert target_ranks(scores, np.array([1, 5])).tolist() == [5, 5]


def test_non_finite_scores_rank_last_and_a_non_finite_target_is_never_a_hit():
    nan, inf = np.nan, np.inf
    scores = np.array(
        [
            [0.0, nan, 0.2, 0.1, 0.3],  # NaN target: every other candidate is ahead -> rank 4
            [0.0, inf, 0.2, 0.1, 0.3],  # +inf target ranks last too -> rank 4
            [0.0, nan, inf, -inf, 0.3],  # finite target: non-finite items are not ahead -> 0
            [0.0, nan, inf, 0.1, -inf],  # -inf target ties with the non-finite items -> 4
        ]
    )
    assert target_ranks(scores, np.array([1, 1, 4, 4])).tolist() == [4, 4, 0, 4]


def test_all_nan_scores_score_zero():
    ranks = target_ranks(np.full((4, 50), np.nan), np.array([3, 7, 9, 11]))
    assert ranks.tolist() == [49] * 4
    assert ranking_metrics(ranks, ks=(5,)) == {"HR@5": 0.0, "NDCG@5": 0.0}


def test_exclusion_mask_removes_padding_and_history():
    mask = exclusion_mask([np.array([2, 3]), np.array([], int)], 5)
    assert mask.tolist() == [[True, False, True, True, False], [True, False, False, False, False]]


def test_hit_rate_and_ndcg_by_hand():
    ranks = np.array([0, 1, 4, 9, 30])
    assert hit_rate(ranks, 5) == 3 / 5
    assert hit_rate(ranks, 10) == 4 / 5
    expected = (1.0 + 1.0 / math.log2(3) + 1.0 / math.log2(6)) / 5
    assert math.isclose(ndcg(ranks, 5), expected)
    expected_10 = expected + 1.0 / math.log2(11) / 5
    assert math.isclose(ndcg(ranks, 10), expected_10)
    metrics = ranking_metrics(ranks, ks=(5, 10))
    assert metrics == {
        "HR@5": hit_rate(ranks, 5),
        "NDCG@5": ndcg(ranks, 5),
        "HR@10": hit_rate(ranks, 10),
        "NDCG@10": ndcg(ranks, 10),
    }


def _fixed_scores_model(table):
    """A model whose scores for a row of ids are `table[ids[:, -1]]`."""
    ids = keras.Input(shape=(2,), dtype="int32")
    scores = keras.layers.Embedding(
        len(table), table.shape[1], embeddings_initializer=keras.initializers.Constant(table)
    )(ids[:, -1])
    return keras.Model(ids, scores)


def test_evaluate_full_ranking_excludes_history_and_padding():
    # Scores by the last input item; column 0 (padding) always scores highest.
    table = np.array(
        [
            [9.0, 0.0, 0.0, 0.0, 0.0],
            [9.0, 0.1, 0.4, 0.3, 0.2],  # after item 1: 2 > 3 > 4 > 1
            [9.0, 0.4, 0.1, 0.2, 0.3],  # after item 2: 1 > 4 > 3 > 2
        ],
        "float32",
    )
    model = _fixed_scores_model(table)
    inputs = np.array([[0, 1], [1, 2], [0, 2]], "int32")
    targets = np.array([3, 3, 3])
    seen = [np.array([1]), np.array([1, 2]), np.array([2])]
    # Ranks: row 0 -> item 2 ahead (1 excluded): 1; row 1 -> item 4 ahead (1 excluded): 1;
    # row 2 -> items 1 and 4 ahead: 2.
    metrics = evaluate_full_ranking(model, inputs, targets, seen, ks=(1, 2), batch_size=2)
    assert metrics["HR@1"] == 0.0
    assert metrics["HR@2"] == 2 / 3
    assert math.isclose(metrics["NDCG@2"], 2 / 3 / math.log2(3))
    # Without the history, item 1 is a candidate again and pushes row 1 to rank 2.
    no_history = evaluate_full_ranking(model, inputs, targets, None, ks=(2,))
    assert no_history["HR@2"] == 1 / 3


def test_ranking_early_stopping_stops_and_restores_the_best_weights():
    table = np.eye(4, dtype="float32")
    model = _fixed_scores_model(table)
    model.compile(optimizer="sgd", loss="mse")
    inputs = np.array([[0, 1], [0, 2]], "int32")
    stopping = RankingEarlyStopping(
        inputs, np.array([1, 2]), None, monitor="HR@1", patience=2, ks=(1,)
    )
    # The data pushes every score to zero; the best validation epoch is the first.
    model.fit(inputs, np.zeros((2, 4), "float32"), epochs=10, callbacks=[stopping], verbose=0)
    assert len(stopping.history) == 3
    assert stopping.best_epoch == 0
    scores = keras.ops.convert_to_numpy(model(inputs))
    assert np.array_equal(np.argmax(scores, axis=1), [1, 2])


class _DivergeAt(keras.callbacks.Callback):
    """Sets every weight to NaN at the start of the epochs in `epochs`."""

    def __init__(self, epochs):
        super().__init__()
        self.epochs = epochs

    def on_epoch_begin(self, epoch, logs=None):
        if epoch in self.epochs:
            self.model.set_weights(
                [np.full(w.shape, np.nan, w.dtype) for w in self.model.get_weights()]
            )


def _fit_with_divergence(diverge_epochs, epochs):
    model = _fixed_scores_model(np.eye(4, dtype="float32"))
    model.compile(optimizer=keras.optimizers.SGD(0.0), loss="mse")
    inputs = np.array([[0, 1], [0, 2]], "int32")
    # Item 2 scores highest after item 2, so target 3 is missed: HR@1 = 0.5 while finite.
    stopping = RankingEarlyStopping(
        inputs, np.array([1, 3]), None, monitor="HR@1", patience=2, ks=(1,)
    )
    callbacks = [_DivergeAt(diverge_epochs), stopping]
    with pytest.warns(UserWarning, match="non-finite validation scores"):
        model.fit(
            inputs, np.zeros((2, 4), "float32"), epochs=epochs, callbacks=callbacks, verbose=0
        )
    return model, stopping


def test_ranking_early_stopping_never_keeps_a_diverged_epoch():
    model, stopping = _fit_with_divergence({1}, epochs=3)
    assert stopping.non_finite_epochs == [1, 2]
    assert [m["HR@1"] for m in stopping.history] == [0.5, 0.0, 0.0]
    assert stopping.best_epoch == 0
    assert all(np.isfinite(w).all() for w in model.get_weights())  # epoch 0's weights are back


def test_ranking_early_stopping_without_a_finite_epoch_keeps_none():
    model, stopping = _fit_with_divergence({0}, epochs=5)
    assert stopping.non_finite_epochs == [0, 1]  # stopped after `patience` epochs
    assert stopping.best_epoch is None


def test_target_ranks_refuse_targets_outside_the_columns():
    """A target of -1 would index from the end and rank the last item; a float one cannot index."""
    scores = np.array([[0.0, 0.9, 0.1, 0.5, 0.3]])
    with pytest.raises(ValueError, match=r"from 0 to 4 of `scores`. Received: min\(targets\)=-1"):
        target_ranks(scores, [-1])
    with pytest.raises(ValueError, match=r"Received: max\(targets\)=5"):
        target_ranks(scores, np.array([5]))
    with pytest.raises(ValueError, match="integer columns. Received: targets.dtype=float64"):
        target_ranks(scores, np.array([2.0]))
    with pytest.raises(ValueError, match=r"shape \(1,\). Received: targets.shape=\(2,\)"):
        target_ranks(scores, np.array([1, 2]))
    with pytest.raises(ValueError, match=r"Received: scores.shape=\(5,\)"):
        target_ranks(scores[0], np.array([1]))
    with pytest.raises(ValueError, match=r"Received: exclude.shape=\(1, 4\)"):
        target_ranks(scores, np.array([1]), np.zeros((1, 4), bool))
    assert target_ranks(scores, [4]).tolist() == [2]  # a list of ints is fine
