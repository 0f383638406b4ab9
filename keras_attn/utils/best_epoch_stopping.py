"""The base of the early-stopping callbacks that keep their best epoch's weights."""

from typing import Any

import keras
import numpy as np

from keras_attn.utils.validation import check_int


class BestEpochStopping(keras.callbacks.Callback):
    """Keeps the best epoch's weights; stops after `patience` epochs without a better score.

    A subclass scores each epoch and passes the score to `count_epoch`. A
    score counts as better only when it is strictly higher than the best so
    far; at the end of training the model gets the best epoch's weights
    (its own, when no epoch was better than `-inf`).

    Args:
        patience: int >= 1, epochs without a better score before stopping.

    Attributes:
        best_epoch: 0-based epoch of the best score, or `None`.
        best_score: the best score, `-inf` until an epoch has one.
        best_weights: the weights of the best epoch, or `None`.
        wait: epochs counted since the best one.
    """

    def __init__(self, patience: int):
        super().__init__()
        self.patience = check_int("patience", patience)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self.best_epoch, self.best_score, self.best_weights = None, -np.inf, None
        self.wait = 0

    def count_epoch(self, epoch: int, score: float | None) -> None:
        """Keeps `epoch`'s weights if `score` is the best yet, else counts one epoch without.

        `None` is never better (an epoch without a valid score).
        """
        if score is not None and score > self.best_score:
            self.best_epoch, self.best_score, self.wait = epoch, score, 0
            self.best_weights = self.model.get_weights()
            return
        self.wait += 1
        if self.wait >= self.patience:
            self.model.stop_training = True

    def on_train_end(self, logs: dict[str, Any] | None = None) -> None:
        if self.best_weights is not None:
            self.model.set_weights(self.best_weights)
