import math

import keras
import numpy as np
import pytest

from keras_attn.layers import BSARecBlock
from keras_attn.models import build_bsarec, build_sasrec
from keras_attn.testing.reference import self_attention_reference
from keras_attn.utils.training import build_optimizer

erf = np.vectorize(math.erf)

HISTORY = np.array([[0, 0, 0, 4, 8, 15], [16, 23, 42, 4, 8, 15]], "int32")


def _models():
    keras.utils.set_random_seed(0)
    return (
        build_sasrec(50, max_sequence_length=6, hidden_dim=16, seed=1),
        build_bsarec(50, max_sequence_length=6, hidden_dim=16, seed=1),
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


@pytest.mark.usefixtures("eager_tensorflow_steps")
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
        build_optimizer(model)
        history = model.fit(HISTORY, np.array([16, 23]), epochs=1, verbose=0)
        assert np.isfinite(history.history["loss"]).all()


def test_bsarec_exports_as_saved_model(tmp_path):
    if keras.backend.backend() != "tensorflow":
        pytest.skip("SavedModel export runs on the TensorFlow backend.")
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = build_bsarec(50, max_sequence_length=6, hidden_dim=16, seed=1)
    model.export(str(tmp_path / "bsarec"), format="tf_saved_model", verbose=False)
    reloaded = tf.saved_model.load(str(tmp_path / "bsarec"))
    np.testing.assert_allclose(reloaded.serve(HISTORY), model(HISTORY), atol=1e-4)


@pytest.mark.parametrize(
    "bad", [{"num_items": 0}, {"max_sequence_length": 2.5}, {"num_layers": 0}, {"hidden_dim": True}]
)
def test_bad_arguments_are_rejected(bad):
    with pytest.raises(ValueError, match="Received:"):
        build_bsarec(**{"num_items": 10, **bad})


def _numpy(weight):
    return keras.ops.convert_to_numpy(weight).astype(np.float64)


def _norm(x, norm):
    centred = x - x.mean(-1, keepdims=True)
    scaled = centred / np.sqrt((centred**2).mean(-1, keepdims=True) + norm.epsilon)
    return scaled * _numpy(norm.gamma) + _numpy(norm.beta)


def _official_block(x, block, allowed):
    """One official BSARec block in numpy: additive -10000 mask, filter over every position."""
    attended = self_attention_reference(x, block.attention, allowed, additive_mask=-10000.0)[0]
    mixed = (1 - block.alpha) * _norm(attended + x, block.attention_norm)
    if block.uses_filter:
        layer = block.fourier_filter
        spectrum = np.fft.rfft(x, axis=1, norm="ortho")  # (batch, length // 2 + 1, dim)
        spectrum[:, layer.cutoff // 2 + 1 :] = 0.0
        low = np.fft.irfft(spectrum, n=x.shape[1], axis=1, norm="ortho")
        filtered = low + _numpy(layer.sqrt_beta) ** 2 * (x - low)
        mixed = mixed + block.alpha * _norm(filtered + x, layer.layer_norm)
    hidden = mixed @ _numpy(block.intermediate_dense.kernel) + _numpy(block.intermediate_dense.bias)
    hidden = 0.5 * hidden * (1.0 + erf(hidden / np.sqrt(2.0)))
    output = hidden @ _numpy(block.output_dense.kernel) + _numpy(block.output_dense.bias)
    return _norm(output + mixed, block.output_norm)


def _official_hidden(model, item_ids, depth):
    """The official model's last hidden states, `(batch, length, dim)`, in numpy."""
    table = _numpy(model.get_layer("items").embeddings)
    x = table[item_ids] + _numpy(model.get_layer("positions").embeddings)[None]
    x = _norm(x, model.get_layer("embedding_norm"))
    length = item_ids.shape[1]
    # Causal and real keys only; the rest get -10000 added.
    allowed = np.tril(np.ones((length, length), bool))[None, None] & (item_ids > 0)[:, None, None]
    for index in range(depth):
        x = _official_block(x, model.get_layer(f"block_{index}"), allowed)
    return x, x[:, -1] @ table.T


@pytest.mark.parametrize("alpha", [0.0, 0.5, 0.9])
def test_matches_the_official_model_on_left_padded_histories(alpha):
    """Every real position of a 3-block model agrees to 1e-5; exact masking does not."""
    item_ids = np.zeros((4, 12), "int32")
    for row, count in enumerate((1, 4, 11, 12)):
        item_ids[row, 12 - count :] = np.arange(1, count + 1) * 3
    outputs = {}
    for additive_mask in (-10000.0, None):
        keras.utils.set_random_seed(0)
        model = build_bsarec(
            40,
            12,
            hidden_dim=16,
            num_layers=3,
            alpha=alpha,
            cutoff=5,
            additive_mask=additive_mask,
            last_position_only=False,  # block_2's hidden states at every position
        )
        rng = np.random.default_rng(1)
        for weight in model.weights:  # non-trivial biases, norms and gains
            weight.assign(weight + 0.1 * rng.normal(size=weight.shape).astype("float32"))
        hidden = keras.Model(model.input, model.get_layer("block_2").output)(item_ids)
        outputs[additive_mask] = (np.asarray(hidden), keras.ops.convert_to_numpy(model(item_ids)))
    expected_hidden, expected_logits = _official_hidden(model, item_ids, depth=3)
    real = item_ids > 0
    hidden, logits = outputs[-10000.0]
    np.testing.assert_allclose(hidden[real], expected_hidden[real], atol=1e-5)
    np.testing.assert_allclose(logits, expected_logits, atol=1e-5)
    exact_gap = np.abs(outputs[None][0][real] - expected_hidden[real]).max()
    # SASRec never mixes positions, so only BSARec depends on the padded rows.
    assert (exact_gap > 1e-3) == (alpha > 0)
