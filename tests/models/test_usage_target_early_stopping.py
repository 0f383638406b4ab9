"""`UsageTargetEarlyStopping`: usage logs, the plateau among epochs at target, the best weights."""

import keras
import numpy as np
import pytest

from keras_attn.models import UsageTargetEarlyStopping, build_vision_transformer, finetune_adavit
from keras_attn.testing import quick_jit_compile

pytestmark = pytest.mark.backend_agnostic


def _data(n, seed):
    """8×8 images whose label is the sign of their upper half's mean: learnable in a few steps."""
    x = np.random.default_rng(seed).normal(size=(n, 8, 8)).astype("float32")
    return x, (x[:, :4].mean((1, 2)) > 0).astype("int32")


def _finetune(stopping, epochs, record=None):
    keras.utils.set_random_seed(0)
    vit = build_vision_transformer((8, 8), 2, patch_size=4, hidden_dim=8, num_layers=2, num_heads=2)
    callbacks = [stopping] + ([record] if record else [])
    return finetune_adavit(
        vit,
        *_data(64, seed=0),
        0.5,
        epochs,
        batch_size=16,
        learning_rate=0.03,
        callbacks=callbacks,
        jit_compile=quick_jit_compile(),
    )


def test_logs_the_validation_usage_and_keeps_the_last_weights_when_never_at_target():
    x_val, y_val = _data(32, seed=1)
    stopping = UsageTargetEarlyStopping(x_val, y_val, patience=1, tolerance=0.0, batch_size=10)
    model = _finetune(stopping, epochs=3)
    assert model.jit_compile == quick_jit_compile()  # as asked
    logs = model.history.history
    assert len(logs["loss"]) == 3  # no epoch counted: the budget ran out
    assert stopping.best_epoch is None and stopping.best_score == -np.inf
    usage = model.usage(model.decide(x_val))  # the last epoch's weights
    for name, value in usage.items():
        assert logs[f"val_usage_{name}"][-1] == pytest.approx(value)
    blocks = (usage["attention"] + usage["mlp"]) / 2
    assert logs["val_usage_blocks"][-1] == pytest.approx(blocks)
    assert logs["val_at_target"] == [0.0, 0.0, 0.0]
    accuracy = np.mean(np.argmax(model.predict(x_val, verbose=0), -1) == y_val)
    assert logs["val_accuracy"][-1] == pytest.approx(accuracy)


def test_stops_after_patience_epochs_without_a_higher_accuracy_and_restores_the_best():
    x_val, y_val = _data(32, seed=1)
    stopping = UsageTargetEarlyStopping(x_val, y_val, patience=2, tolerance=1.0)  # all at target
    weights = []
    record = keras.callbacks.LambdaCallback(
        on_epoch_end=lambda epoch, logs: weights.append(model_weights())
    )
    model_weights = lambda: [np.array(w) for w in stopping.model.get_weights()]  # noqa: E731
    model = _finetune(stopping, epochs=30, record=record)
    accuracies = model.history.history["val_accuracy"]
    best = int(np.argmax(accuracies))  # the first of the highest
    assert stopping.best_epoch == best and stopping.best_score == accuracies[best]
    assert len(accuracies) == best + 1 + 2 < 30  # stopped two epochs after the best
    for restored, kept in zip(model.get_weights(), weights[best], strict=True):
        np.testing.assert_array_equal(restored, kept)
    last = weights[-1]
    assert any(not np.array_equal(a, b) for a, b in zip(model.get_weights(), last, strict=True))


def test_bad_arguments():
    x, y = _data(4, seed=0)
    with pytest.raises(ValueError, match="Received: patience=0"):
        UsageTargetEarlyStopping(x, y, patience=0)
    with pytest.raises(ValueError, match="Received: tolerance=-0.1"):
        UsageTargetEarlyStopping(x, y, tolerance=-0.1)
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        UsageTargetEarlyStopping(x, y, batch_size=0)
    with pytest.raises(ValueError, match="Received: x with 4 and y with 3"):
        UsageTargetEarlyStopping(x, y[:3])
    vit = build_vision_transformer((8, 8), 2, patch_size=4, hidden_dim=8, num_layers=2, num_heads=2)
    vit.compile("sgd", "sparse_categorical_crossentropy")
    before = [np.array(w) for w in vit.get_weights()]
    stopping = UsageTargetEarlyStopping(x, y)
    with pytest.raises(ValueError, match="Received: model of type Functional"):
        vit.fit(x, y, epochs=1, verbose=0, callbacks=[stopping])
    for after, kept in zip(vit.get_weights(), before, strict=True):
        np.testing.assert_array_equal(after, kept)  # no step was taken
