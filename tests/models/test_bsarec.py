import keras
import numpy as np
import pytest

from keras_attn.layers import BSARecBlock
from keras_attn.models import build_bsarec, build_sasrec

HISTORY = np.array([[0, 0, 0, 4, 8, 15], [16, 23, 42, 4, 8, 15]], "int32")


def _models():
    keras.utils.set_random_seed(0)
    return (
        build_sasrec(50, max_length=6, dim=16, seed=1),
        build_bsarec(50, max_length=6, dim=16, seed=1),
    )


def test_outputs_next_item_logits_over_all_items_and_padding():
    for model in _models():
        assert model(HISTORY).shape == (2, 51)
        blocks = [layer for layer in model.layers if isinstance(layer, BSARecBlock)]
        assert [b.name for b in blocks] == ["block_0", "block_1"]
    sasrec, bsarec = _models()
    for name in ("block_0", "block_1"):
        assert sasrec.get_layer(name).alpha == 0.0
        assert not sasrec.get_layer(name).uses_filter
        assert bsarec.get_layer(name).alpha == 0.9
        assert bsarec.get_layer(name).cutoff == 3
    # SASRec has no filter weights; otherwise both have the same parameters.
    assert bsarec.count_params() - sasrec.count_params() == 2 * (16 + 2 * 16)


def test_logits_are_the_last_hidden_state_times_the_item_embeddings():
    _, model = _models()
    hidden = keras.Model(model.input, model.get_layer("block_1").output)(HISTORY)[:, -1]
    table = keras.ops.convert_to_numpy(model.get_layer("items").embeddings)
    np.testing.assert_allclose(model(HISTORY), np.asarray(hidden) @ table.T, atol=1e-5)


def test_sasrec_ignores_padded_positions_and_bsarec_mixes_them():
    sasrec, bsarec = _models()
    for model, ignores_padding in ((sasrec, True), (bsarec, False)):
        items = model.get_layer("items")
        before = keras.ops.convert_to_numpy(model(HISTORY[:1]))[:, 1:]
        table = keras.ops.convert_to_numpy(items.embeddings)
        table[0] += np.random.default_rng(1).normal(size=table.shape[1])  # new padding vector
        items.embeddings.assign(table)
        after = keras.ops.convert_to_numpy(model(HISTORY[:1]))[:, 1:]
        assert np.allclose(before, after, atol=1e-5) == ignores_padding


def test_save_load_and_training(tmp_path):
    for model in _models():
        path = str(tmp_path / f"{model.name}.keras")
        model.save(path)
        reloaded = keras.models.load_model(path)
        np.testing.assert_allclose(reloaded(HISTORY), model(HISTORY), atol=1e-5)
        model.compile(
            optimizer="adam",
            loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        history = model.fit(HISTORY, np.array([16, 23]), epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"]).all()


def test_bsarec_exports_as_saved_model(tmp_path):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("SavedModel export runs on the TensorFlow backend.")
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = build_bsarec(50, max_length=6, dim=16, seed=1)
    model.export(str(tmp_path / "bsarec"), format="tf_saved_model", verbose=False)
    reloaded = tf.saved_model.load(str(tmp_path / "bsarec"))
    np.testing.assert_allclose(reloaded.serve(HISTORY), model(HISTORY), atol=1e-4)


@pytest.mark.parametrize(
    "bad", [{"num_items": 0}, {"max_length": 2.5}, {"depth": 0}, {"dim": True}]
)
def test_bad_arguments_are_rejected(bad):
    with pytest.raises(ValueError, match="Received:"):
        build_bsarec(**{"num_items": 10, **bad})
