"""Training a Gaussian forecaster on random windows of one series."""

import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from keras_attn._typing import Tensor
from keras_attn.forecasting.windows import make_windows

if TYPE_CHECKING:
    import keras


def sample_window_starts(train_end: int, length: int, count: int, seed: int = 0) -> np.ndarray:
    """Starts of `count` random windows of `length` steps that end by `train_end`.

    Every start is in `[1, train_end - length]` (step 0 has no lagged input),
    drawn uniformly with replacement, so no window reads a step at or after
    `train_end`.

    Args:
        train_end: int, the first step that training must not see.
        length: int, steps of each window (context plus horizon).
        count: int, number of windows.
        seed: int, seed of the draw.

    Returns:
        `(count,)` int64 array.

    Example:

    >>> starts = sample_window_starts(train_end=10, length=4, count=100)
    >>> int(starts.min()), int(starts.max())
    (1, 6)
    """
    if train_end - length < 1:
        raise ValueError(
            f"`train_end` must leave room for a window of {length} steps after step 0. "
            f"Received: train_end={train_end}"
        )
    return np.random.default_rng(seed).integers(1, train_end - length + 1, size=count)


def train_forecaster(
    model: "keras.Model",
    values: Tensor,
    covariates: Mapping[str, Tensor],
    train_end: int,
    context: int,
    horizon: int,
    windows: int,
    epochs: int,
    learning_rate: float = 3e-3,
    batch_size: int = 64,
    seed: int = 0,
    jit_compile: bool = False,
) -> dict[str, float]:
    """Fits `model` on random windows before `train_end` with the Gaussian NLL.

    Draws `windows` window starts with `sample_window_starts`, builds their
    inputs and scaled targets with `make_windows`, compiles `model` with Adam
    and `keras_attn.losses.GaussianNegativeLogLikelihood` and fits it,
    shuffling each epoch. For a repeatable run, call
    `keras.utils.set_random_seed` before building `model`.

    Args:
        model: a Keras model from the inputs of `make_windows` to
            `(batch, length, 2)` means and standard deviations.
        values: `(T,)` the series.
        covariates: dict `name -> (T,)` array, as for `make_windows`.
        train_end: int, the first step training must not see.
        context: int, conditioning steps of each window.
        horizon: int, forecast steps of each window.
        windows: int, number of training windows.
        epochs: int, passes over the windows.
        learning_rate: float, Adam's learning rate.
        batch_size: int, windows per step.
        seed: int, seed of the window draw.
        jit_compile: bool, compile the training step with XLA (small models
            on CPU compile for longer than XLA saves).

    Returns:
        dict with `"train_seconds"` (of `fit`), `"final_train_nll"` (the last
        epoch's mean loss) and `"parameters"` (the model's parameter count).

    Example:

    ```python
    model = build_logsparse_forecaster(max_sequence_length=192, hidden_dim=16, num_heads=4)
    info = train_forecaster(model, values, covariates, 5000, 168, 24, windows=1024, epochs=6)
    ```
    """
    import keras

    from keras_attn.losses import GaussianNegativeLogLikelihood
    from keras_attn.utils.training import build_optimizer

    starts = sample_window_starts(train_end, context + horizon, windows, seed)
    inputs, targets, _ = make_windows(values, covariates, starts, context, horizon)
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=GaussianNegativeLogLikelihood(),
        jit_compile=jit_compile,
    )
    start = time.perf_counter()
    build_optimizer(model)
    history = model.fit(
        inputs, targets, batch_size=batch_size, epochs=epochs, verbose=0, shuffle=True
    )
    return {
        "train_seconds": time.perf_counter() - start,
        "final_train_nll": float(history.history["loss"][-1]),
        "parameters": model.count_params(),
    }
