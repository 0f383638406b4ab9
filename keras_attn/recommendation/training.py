"""Training of next-item models: the two losses, and runs that resume where they stopped."""

import os
import pathlib
import time
from collections.abc import Sequence

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.losses import SampledBinaryCrossentropy
from keras_attn.recommendation.data import PADDING_ITEM, LeaveOneOutSplit
from keras_attn.recommendation.evaluation import RankingEarlyStopping
from keras_attn.utils.run_state import read_run_state, restore_run_state, save_run_state
from keras_attn.utils.training import build_optimizer, ordered_batches

# "softmax": cross-entropy over all items (BSARec's official training);
# "bce": binary cross-entropy on the target and one sampled negative item
# (the official SASRec's training).
LOSSES = ("softmax", "bce")
STATE_VERSION = 1
# The early-stopping state that a state file records.
PROGRESS_KEYS = ("epoch", "train_loss", "seconds")
STOPPING_KEYS = ("history", "best_epoch", "best_score", "wait", "non_finite_epochs")


def sample_negatives(
    inputs: Tensor, targets: Tensor, num_items: int, rng: np.random.Generator
) -> np.ndarray:
    """One negative item per sample, as the official SASRec training draws it.

    Each is uniform over the items `1..num_items` that are neither in the
    sample's history (the non-padding items of its row of `inputs`) nor its
    target: an item of the sample is drawn again until it is none of them.

    Args:
        inputs: `(num_samples, max_sequence_length)` left-padded histories.
        targets: `(num_samples,)` the item after each history.
        num_items: int, the largest item id.
        rng: a `numpy.random.Generator`, the only source of randomness.

    Returns:
        int32 array of shape `(num_samples,)`.

    Example:

    >>> sample_negatives(np.array([[0, 1], [2, 3]]), np.array([2, 1]), 4,
    ...                  np.random.default_rng(0)).tolist()
    [4, 4]
    """
    inputs, targets = np.asarray(inputs), np.asarray(targets)
    # A row holds at most max_sequence_length + 1 items: only then can it hold all of them.
    if num_items <= inputs.shape[1] + 1 and _no_candidate(inputs, targets, num_items):
        raise ValueError(
            "A sample has no negative item: its history and target hold every item. "
            f"Received: num_items={num_items}"
        )
    negatives = np.zeros(len(targets), np.int32)
    redraw = np.arange(len(targets))
    while len(redraw):
        negatives[redraw] = rng.integers(1, num_items + 1, len(redraw))
        drawn = negatives[redraw]
        seen = (inputs[redraw] == drawn[:, None]).any(axis=1) | (targets[redraw] == drawn)
        redraw = redraw[seen]
    return negatives


def _no_candidate(inputs, targets, num_items):
    """Whether some row's history and target cover every item `1..num_items`."""
    for row, target in zip(inputs, targets, strict=True):
        items = set(row[row != PADDING_ITEM].tolist()) | {int(target)}
        if len(items) >= num_items:
            return True
    return False


def compile_recommender(
    model, loss="softmax", learning_rate=1e-3, jit_compile=False, steps_per_execution=1
):
    """Compiles `model` with Adam and one of `LOSSES`, its optimizer built."""
    if loss not in LOSSES:
        raise ValueError(f"`loss` must be one of {LOSSES}. Received: loss={loss!r}")
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=(
            SampledBinaryCrossentropy()
            if loss == "bce"
            else keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        ),
        jit_compile=jit_compile,
        steps_per_execution=steps_per_execution,
    )
    build_optimizer(model)


def epoch_samples(split, epoch, seed, loss, num_items):
    """The training inputs and targets of one epoch, in its shuffled order.

    The order (and, with the `"bce"` loss, the negatives) come from a
    generator seeded with `(seed, epoch)`, so an epoch is the same whether
    the run was interrupted before it or not.
    """
    rng = np.random.default_rng([seed, epoch])
    order = rng.permutation(len(split.train_targets))
    inputs, targets = split.train_inputs[order], split.train_targets[order]
    if loss == "bce":
        negatives = sample_negatives(inputs, targets, num_items, rng)
        targets = np.stack([targets, negatives], axis=1)  # (samples, 2)
    return inputs, targets


def fit_recommender(
    model: keras.Model,
    split: LeaveOneOutSplit,
    *,
    num_items: int,
    loss: str = "softmax",
    epochs: int = 200,
    patience: int = 10,
    learning_rate: float = 1e-3,
    batch_size: int = 256,
    seed: int = 0,
    jit_compile: bool = False,
    steps_per_execution: int = 1,
    state_path: str | os.PathLike | None = None,
    callbacks: Sequence[keras.callbacks.Callback] = (),
) -> dict:
    """Trains a next-item model with early stopping, resuming a saved run.

    Each epoch shuffles the training samples with a generator seeded with
    `(seed, epoch)` and trains on them once; then `RankingEarlyStopping`
    ranks every item for the validation queries, and training stops after
    `patience` epochs without a higher validation NDCG@20. The best
    weights are restored at the end.

    With `state_path`, the whole state is saved there after every epoch:
    every model variable (weights and the dropout layers' seeds), the
    optimizer's variables, the epoch, the early-stopping state with its best
    weights, the losses and the time spent. The file is replaced whole or
    not at all. A later call with the same `state_path` starts from it, and
    gives the same result as a run that was never interrupted. A state file
    that cannot be read (truncated, empty, not a state file) is renamed to
    `<name>.damaged`, with a warning, and the run starts from its first
    epoch; a state file of another model raises a `ValueError` that names
    it, before anything is restored.

    Args:
        model: a built `keras.Model` from `(batch, max_sequence_length)` item ids to
            `(batch, num_items + 1)` logits, such as `build_bsarec`.
        split: the `LeaveOneOutSplit` to train and validate on.
        num_items: int, the largest item id (negatives are drawn from
            `1..num_items`).
        loss: one of `LOSSES`: `"softmax"` (cross-entropy over all items)
            or `"bce"` (`SampledBinaryCrossentropy` with one negative drawn
            per sample and epoch by `sample_negatives`).
        epochs: int, most epochs.
        patience: int, epochs without improvement before stopping.
        learning_rate: float, Adam's learning rate.
        batch_size: int, training batch size.
        seed: int, seed of the epochs' order and negatives.
        jit_compile: bool, train under XLA.
        steps_per_execution: int, training steps per call into the compiled
            function (Keras' `compile` argument; 1 on torch). More steps
            per call spend less time between steps; the steps are the same.
        state_path: optional path of the state file (a `.npz`).
        callbacks: Keras callbacks passed to each epoch's `fit`.

    Returns:
        dict with `"best_epoch"` (1-based; `None` when every epoch's scores
        were non-finite), `"epochs_run"`, `"valid"` (the validation metrics
        of every epoch), `"train_loss"` (one mean per epoch) and
        `"seconds"` (training and validation, summed over resumed parts).
    """
    compile_recommender(model, loss, learning_rate, jit_compile, steps_per_execution)
    stopping = RankingEarlyStopping(
        split.valid_inputs, split.valid_targets, split.valid_seen, patience=patience
    )
    stopping.set_model(model)
    stopping.on_train_begin()
    progress = {"epoch": 0, "train_loss": [], "seconds": 0.0}
    if state_path is not None and pathlib.Path(state_path).is_file():
        saved_progress = load_state(state_path, model, stopping)
        if saved_progress is not None:  # else the damaged file was set aside
            progress = saved_progress
    while progress["epoch"] < epochs and stopping.wait < patience:
        epoch, start = progress["epoch"], time.perf_counter()
        inputs, targets = epoch_samples(split, epoch, seed, loss, num_items)
        history = model.fit(
            **ordered_batches(inputs, targets, batch_size),
            epochs=epoch + 1,
            initial_epoch=epoch,
            callbacks=list(callbacks),
            verbose=0,
        )
        stopping.on_epoch_end(epoch)
        progress["train_loss"].append(float(history.history["loss"][-1]))
        progress["seconds"] += time.perf_counter() - start
        progress["epoch"] = epoch + 1
        if state_path is not None:
            save_state(state_path, model, stopping, progress)
    stopping.on_train_end()
    return {
        "best_epoch": None if stopping.best_epoch is None else stopping.best_epoch + 1,
        "epochs_run": progress["epoch"],
        "valid": stopping.history,
        "train_loss": progress["train_loss"],
        "seconds": progress["seconds"],
    }


def save_state(path, model, stopping, progress):
    """Writes a run's state to `path` (`.npz`), whole or not at all."""
    record = {
        "version": STATE_VERSION,
        "progress": progress,
        "stopping": {
            "history": stopping.history,
            "best_epoch": stopping.best_epoch,
            "best_score": None if stopping.best_epoch is None else stopping.best_score,
            "wait": stopping.wait,
            "non_finite_epochs": stopping.non_finite_epochs,
        },
    }
    save_run_state(path, model, record, stopping.best_weights or [])


def load_state(path, model, stopping):
    """Restores what `save_state` wrote into `model` and `stopping`; returns the progress.

    Returns `None`, with the file set aside, when the file cannot be read.
    A state of another version or model raises a `ValueError` before
    anything is restored.
    """
    fields = {"version": (), "progress": PROGRESS_KEYS, "stopping": STOPPING_KEYS}
    saved = read_run_state(path, fields)
    if saved is None:
        return None
    record, arrays = saved
    if record["version"] != STATE_VERSION:
        raise ValueError(
            f"The state file {path} was written by another version of keras_attn; remove it "
            f"to train from the first epoch. Received: version={record['version']!r}"
        )
    restore_run_state(path, model, arrays)
    state = record["stopping"]
    stopping.history = state["history"]
    stopping.best_epoch = state["best_epoch"]
    stopping.best_score = -np.inf if state["best_score"] is None else state["best_score"]
    stopping.wait = state["wait"]
    stopping.non_finite_epochs = state["non_finite_epochs"]
    stopping.best_weights = arrays["best"] or None
    return record["progress"]
