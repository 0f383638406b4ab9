import keras
import numpy as np
import pytest

from keras_attn.losses import SampledBinaryCrossentropy
from keras_attn.models import build_bsarec, build_sasrec
from keras_attn.recommendation import (
    RankingEarlyStopping,
    fit_recommender,
    leave_one_out_split,
    sample_negatives,
)
from keras_attn.recommendation.training import compile_recommender, load_state, save_state
from keras_attn.testing.arrays import to_numpy
from keras_attn.utils.results import set_aside, write_atomically
from keras_attn.utils.training import ordered_batches

NUM_ITEMS = 9
SEQUENCES = [
    np.array([1, 2, 3, 4, 5, 6]),
    np.array([2, 4, 6, 8, 1, 3]),
    np.array([9, 7, 5, 3, 1]),
    np.array([3, 6, 9, 2, 5, 8]),
]


@pytest.mark.backend_agnostic
def test_sampled_binary_crossentropy_matches_numpy():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(5, 8)).astype("float32")
    ids = np.stack([rng.integers(1, 8, 5), rng.integers(1, 8, 5)], axis=1)
    rows = np.arange(5)
    positive, negative = logits[rows, ids[:, 0]], logits[rows, ids[:, 1]]
    # BCE with labels 1 and 0: -log(sigmoid(p)) - log(1 - sigmoid(n)), batch mean.
    sigmoid = 1.0 / (1.0 + np.exp(-np.float64(np.stack([positive, negative]))))
    expected = np.mean(-np.log(sigmoid[0]) - np.log(1.0 - sigmoid[1]))
    loss = SampledBinaryCrossentropy()(ids, logits)
    np.testing.assert_allclose(to_numpy(loss), expected, rtol=1e-6)


def test_negatives_avoid_the_history_and_the_target():
    inputs = np.array([[0, 1, 2], [3, 4, 5], [0, 0, 0]])
    targets = np.array([3, 6, 1])
    negatives = sample_negatives(inputs, targets, 7, np.random.default_rng(0))
    allowed = [{4, 5, 6, 7}, {1, 2, 7}, {2, 3, 4, 5, 6, 7}]
    for negative, items in zip(negatives.tolist(), allowed, strict=True):
        assert negative in items
    again = sample_negatives(inputs, targets, 7, np.random.default_rng(0))
    assert again.tolist() == negatives.tolist()
    # Only item 5 is allowed in each row: the draws are repeated until they find it.
    inputs, targets = np.array([[1, 2, 3], [2, 3, 4]]), np.array([4, 1])
    assert sample_negatives(inputs, targets, 5, np.random.default_rng(1)).tolist() == [5, 5]
    with pytest.raises(ValueError, match="no negative item.*Received: num_items=4"):
        sample_negatives(np.array([[1, 2, 3]]), np.array([4]), 4, np.random.default_rng(0))


class _Interrupt(keras.callbacks.Callback):
    """Stops the process-like run in the middle of its second epoch."""

    def on_train_batch_begin(self, batch, logs=None):
        if self.params and batch == 1 and self._epoch == 1:
            raise KeyboardInterrupt

    def on_epoch_begin(self, epoch, logs=None):
        self._epoch = epoch


def _run(state_path, callbacks=()):
    keras.utils.set_random_seed(0)
    model = build_sasrec(NUM_ITEMS, max_sequence_length=4, hidden_dim=8, num_layers=1, seed=0)
    split = leave_one_out_split(SEQUENCES, max_sequence_length=4)
    result = fit_recommender(
        model,
        split,
        num_items=NUM_ITEMS,
        loss="bce",
        epochs=2,
        patience=2,
        batch_size=5,
        seed=0,
        state_path=state_path,
        callbacks=callbacks,
    )
    return result, [to_numpy(v) for v in model.variables]


@pytest.fixture(scope="module")
def whole_run(tmp_path_factory):
    """The result and weights of a run never interrupted."""
    return _run(tmp_path_factory.mktemp("whole") / "whole.npz")


def _assert_same_run(got, expected):
    (result, weights), (whole, whole_weights) = got, expected
    assert result["train_loss"] == whole["train_loss"]
    assert result["valid"] == whole["valid"]
    assert result["best_epoch"] == whole["best_epoch"]
    for got_weight, expected_weight in zip(weights, whole_weights, strict=True):
        np.testing.assert_array_equal(got_weight, expected_weight)


def test_an_interrupted_run_resumes_to_the_same_result(tmp_path, whole_run):
    assert whole_run[0]["epochs_run"] == 2
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "cut.npz", [_Interrupt()])
    assert (tmp_path / "cut.npz").is_file()  # the first epoch's state
    _assert_same_run(_run(tmp_path / "cut.npz"), whole_run)
    assert [p.name for p in tmp_path.iterdir()] == ["cut.npz"]


def test_a_damaged_state_is_set_aside_and_the_run_starts_again(tmp_path, whole_run):
    """A state file cut short (a full disk, a copy stopped halfway) is kept and not resumed."""
    with pytest.raises(KeyboardInterrupt):
        _run(tmp_path / "cut.npz", [_Interrupt()])
    damaged = (tmp_path / "cut.npz").read_bytes()[:1000]
    (tmp_path / "cut.npz").write_bytes(damaged)
    with pytest.warns(
        UserWarning, match=r"cut\.npz cannot be read \(BadZipFile.*cut\.npz\.damaged"
    ):
        rerun = _run(tmp_path / "cut.npz")
    _assert_same_run(rerun, whole_run)
    assert (tmp_path / "cut.npz.damaged").read_bytes() == damaged


def _saved_state(path, hidden_dim=8):
    """A real state file of a compiled model, and the model and its early stopping."""
    model = build_sasrec(NUM_ITEMS, max_sequence_length=4, hidden_dim=hidden_dim, num_layers=1)
    compile_recommender(model)
    split = leave_one_out_split(SEQUENCES, max_sequence_length=4)
    stopping = RankingEarlyStopping(split.valid_inputs, split.valid_targets, split.valid_seen)
    stopping.set_model(model)
    stopping.on_train_begin()
    save_state(path, model, stopping, {"epoch": 1, "train_loss": [2.0], "seconds": 1.0})
    return model, stopping


def _not_a_state(path):
    np.savez(path, model_0=np.zeros(3))


DAMAGES = {
    "empty": lambda path: path.write_bytes(b""),
    "truncated": lambda path: path.write_bytes(path.read_bytes()[:-100]),
    "overwritten": lambda path: path.write_bytes(b"\0" * len(path.read_bytes())),
    "not a state": _not_a_state,
}


@pytest.mark.backend_agnostic
@pytest.mark.parametrize("damage", DAMAGES.values(), ids=DAMAGES.keys())
def test_a_state_file_that_cannot_be_read_is_set_aside_unread(tmp_path, damage):
    path = tmp_path / "state.npz"
    model, stopping = _saved_state(path)
    damage(path)
    damaged = path.read_bytes()
    weights = [to_numpy(v) for v in model.variables]
    with pytest.warns(UserWarning, match=r"state\.npz cannot be read.*state\.npz\.damaged"):
        assert load_state(path, model, stopping) is None
    assert [p.name for p in tmp_path.iterdir()] == ["state.npz.damaged"]
    assert (tmp_path / "state.npz.damaged").read_bytes() == damaged
    for variable, weight in zip(model.variables, weights, strict=True):
        np.testing.assert_array_equal(to_numpy(variable), weight)


@pytest.mark.backend_agnostic
def test_a_second_damaged_file_does_not_replace_the_first(tmp_path):
    path = tmp_path / "state.npz"
    for content in (b"first", b"second"):
        path.write_bytes(content)
        with pytest.warns(UserWarning, match="cannot be read"):
            set_aside(path, "damaged")
    assert (tmp_path / "state.npz.damaged").read_bytes() == b"first"
    assert (tmp_path / "state.npz.damaged-2").read_bytes() == b"second"


@pytest.mark.backend_agnostic
def test_the_state_of_another_model_is_refused_before_anything_is_restored(tmp_path):
    path = tmp_path / "state.npz"
    _saved_state(path, hidden_dim=16)
    model, stopping = _saved_state(tmp_path / "mine.npz", hidden_dim=8)
    weights = [to_numpy(v) for v in model.variables]
    with pytest.raises(
        ValueError, match=r"state\.npz does not fit this model.*remove it.*Received"
    ):
        load_state(path, model, stopping)
    for variable, weight in zip(model.variables, weights, strict=True):
        np.testing.assert_array_equal(to_numpy(variable), weight)
    assert path.is_file()  # not a damaged file: left where it is


def test_a_failed_atomic_write_keeps_the_old_file(tmp_path):
    path = tmp_path / "state.npz"
    path.write_bytes(b"old")

    def fail(file):
        file.write(b"half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        write_atomically(path, fail)
    assert path.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["state.npz"]


class _StepLosses(keras.callbacks.Callback):
    """The running mean loss that Keras reports after each call into the training step."""

    def __init__(self):
        super().__init__()
        self.losses = {}

    def on_train_batch_end(self, batch, logs=None):
        self.losses[batch] = float(logs["loss"])


def _first_steps(builder, jit_compile, steps_per_execution, steps=30, batch_size=8, as_arrays=True):
    rng = np.random.default_rng(0)
    inputs = rng.integers(0, NUM_ITEMS + 1, (steps * batch_size, 6)).astype("int32")
    targets = rng.integers(1, NUM_ITEMS + 1, steps * batch_size).astype("int32")
    keras.utils.set_random_seed(0)
    model = builder(NUM_ITEMS, max_sequence_length=6, hidden_dim=8, num_layers=2, seed=0)
    compile_recommender(model, "softmax", 1e-3, jit_compile, steps_per_execution)
    record = _StepLosses()
    if as_arrays:
        batches = {"x": inputs, "y": targets, "batch_size": batch_size, "shuffle": False}
    else:
        batches = ordered_batches(inputs, targets, batch_size)
    model.fit(**batches, callbacks=[record], verbose=0)
    return record.losses, [to_numpy(w) for w in model.weights]


def test_ordered_batches_take_the_same_first_30_steps_as_arrays():
    arrays, arrays_weights = _first_steps(build_sasrec, False, steps_per_execution=1)
    ordered, ordered_weights = _first_steps(build_sasrec, False, 1, as_arrays=False)
    assert sorted(ordered) == list(range(30))
    for step, loss in ordered.items():
        np.testing.assert_allclose(loss, arrays[step], rtol=0, atol=1e-6)
    for got, expected in zip(ordered_weights, arrays_weights, strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-6)


def test_tensorflow_batches_do_not_autotune():
    """Keras' own pipeline from arrays autotunes, and each `fit` then waits ~20 s at its end."""
    if keras.backend.backend() != "tensorflow":
        pytest.skip("A tf.data pipeline only on TensorFlow.")
    x, y = np.zeros((10, 3), "int32"), np.ones((10,), "int32")
    batches = ordered_batches(x, y, 4)
    assert batches["shuffle"] is False  # Keras warns when a dataset is told to shuffle
    dataset = batches["x"]
    assert dataset.options().autotune.enabled is False
    assert [len(batch) for batch, _ in dataset.as_numpy_iterator()] == [4, 4, 2]


def test_ordered_batches_refuse_inputs_and_targets_of_other_row_counts():
    x, y = np.zeros((10, 3), "int32"), np.ones((9,), "int32")
    with pytest.raises(ValueError, match="Received: x with 10 rows and y with 9 rows"):
        ordered_batches(x, y, 4)
    with pytest.raises(ValueError, match="Received: batch_size=0"):
        ordered_batches(x, x, 0)


# Each model at the reproduction's XLA choice: XLA draws other dropout masks, so it
# is part of the trajectory.
@pytest.mark.slow
@pytest.mark.parametrize(
    "builder, jit_compile", [(build_sasrec, False), (build_bsarec, True)], ids=["sasrec", "bsarec"]
)
def test_more_steps_per_call_take_the_same_first_30_steps(builder, jit_compile):
    former, former_weights = _first_steps(builder, jit_compile, steps_per_execution=1)
    faster, faster_weights = _first_steps(builder, jit_compile, steps_per_execution=5)
    assert sorted(faster) == list(range(4, 30, 5))
    for step, loss in faster.items():
        np.testing.assert_allclose(loss, former[step], rtol=0, atol=1e-5)
    for got, expected in zip(faster_weights, former_weights, strict=True):
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
