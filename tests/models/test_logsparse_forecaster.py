import math

import keras
import numpy as np
import pytest

from keras_attn.layers import ConvolutionalSelfAttention, LogSparseAttention, TransformerBlock
from keras_attn.losses import GaussianNegativeLogLikelihood
from keras_attn.metrics import RhoRisk
from keras_attn.models import build_logsparse_forecaster
from keras_attn.testing.arrays import assert_reloads
from keras_attn.utils.training import build_optimizer


def _inputs(batch=2, length=40, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "lagged_target": rng.normal(size=(batch, length, 1)).astype("float32"),
        "hour_of_day": rng.integers(0, 24, size=(batch, length)).astype("int32"),
        "day_of_week": rng.integers(0, 7, size=(batch, length)).astype("int32"),
    }


def _model(**kwargs):
    keras.utils.set_random_seed(0)
    config = {
        "max_sequence_length": 40,
        "hidden_dim": 8,
        "num_heads": 2,
        "num_layers": 2,
        "dropout": 0.0,
    }
    return build_logsparse_forecaster(**{**config, "local_window": 3, "kernel_size": 3, **kwargs})


def _attention_layers(model):
    return [layer.attention for layer in model.layers if isinstance(layer, TransformerBlock)]


def test_forecaster_layers_follow_the_arguments():
    logsparse = _model()
    full = _model(attention="full", kernel_size=1)
    attention = _attention_layers(logsparse)
    assert [type(layer) for layer in attention] == [LogSparseAttention] * 2
    assert attention[0].kernel_size == 3
    assert attention[0].attention_pattern.local_window == 3
    dense = _attention_layers(full)
    assert [type(layer) for layer in dense] == [ConvolutionalSelfAttention] * 2
    assert dense[0].attention_pattern == "causal" and dense[0].kernel_size == 1
    with pytest.raises(ValueError, match="Received: attention='sparse'"):
        _model(attention="sparse")
    with pytest.raises(ValueError, match="`hidden_dim`.*Received: hidden_dim=10"):
        _model(hidden_dim=10, num_heads=4)


def test_forecaster_is_causal_and_outputs_positive_scales():
    model = _model()
    inputs = _inputs()
    params = keras.ops.convert_to_numpy(model(inputs))
    assert params.shape == (2, 40, 2) and np.all(params[..., 1] > 0)
    changed = {key: value.copy() for key, value in inputs.items()}
    changed["lagged_target"][:, 25:] += 3.0
    changed["hour_of_day"][:, 25:] = 0
    np.testing.assert_allclose(model(changed)[:, :25], params[:, :25], atol=1e-5)
    assert not np.allclose(model(changed)[:, 25:], params[:, 25:])


def _flat_forecaster(model, dropout=0.0):
    """The forecaster as it was built before its blocks were `TransformerBlock`s.

    Every layer is top-level (`block_<i>_norm1`, `block_<i>_attention`, ...)
    and takes the weights of the matching layer of `model`.
    """
    x = keras.Input((None, 1), name="lagged_target")
    covariates = {name: keras.Input((None,), dtype="int32", name=name) for name in _inputs()}
    del covariates["lagged_target"]
    h = _copy(model.get_layer("target_embedding"))(x)
    for name, covariate in covariates.items():
        h = h + _copy(model.get_layer(f"{name}_embedding"))(covariate)
    h = _copy(model.get_layer("position_embedding"))(h)
    for block in (layer for layer in model.layers if isinstance(layer, TransformerBlock)):
        name = block.name
        attended = _copy(block.attention, f"{name}_attention")(
            _copy(block.attention_norm, f"{name}_norm1")(h)
        )
        h = h + keras.layers.Dropout(dropout)(attended)
        hidden = _copy(block.mlp_norm, f"{name}_norm2")(h)
        hidden = _copy(block.mlp_hidden, f"{name}_mlp_hidden")(hidden)
        hidden = _copy(block.mlp_output, f"{name}_mlp_output")(
            keras.layers.Dropout(dropout)(hidden)
        )
        h = h + keras.layers.Dropout(dropout)(hidden)
    h = _copy(model.get_layer("final_norm"))(h)
    outputs = _copy(model.get_layer("gaussian_head"))(h)
    flat = keras.Model({"lagged_target": x, **covariates}, outputs)
    for layer in flat.layers:
        if layer.weights:
            layer.set_weights(_SOURCES.pop(layer.name).get_weights())
    return flat


_SOURCES = {}


def _copy(layer, name=None):
    """An unbuilt copy of `layer` named `name`, to take `layer`'s weights."""
    name = name or layer.name
    _SOURCES[name] = layer
    return layer.__class__.from_config({**layer.get_config(), "name": name})


@pytest.mark.parametrize("attention", ["logsparse", "full"])
def test_forecaster_equals_its_flat_construction(attention):
    model = _model(attention=attention)
    flat = _flat_forecaster(model)
    # Every weight of the model is used once by the flat construction.
    assert flat.count_params() == model.count_params()
    inputs = _inputs()
    np.testing.assert_allclose(flat(inputs), model(inputs), atol=1e-5)


def _fit(model, jit_compile, epochs):
    inputs = _inputs(batch=16)
    targets = inputs["lagged_target"][..., 0] * 0.5 + 1.0
    model.compile(
        optimizer=keras.optimizers.Adam(1e-2),
        loss=GaussianNegativeLogLikelihood(),
        metrics=[RhoRisk(0.5), RhoRisk(0.9)],
        jit_compile=jit_compile,
    )
    build_optimizer(model)
    history = model.fit(inputs, targets, epochs=epochs, batch_size=16, verbose=0)
    assert model.jit_compile is jit_compile
    return inputs, targets, history.history


@pytest.mark.usefixtures("eager_tensorflow_steps")
def test_forecaster_trains_and_round_trips(tmp_path):
    model = _model(num_layers=1)
    inputs, targets, history = _fit(model, jit_compile=False, epochs=3)
    assert history["loss"][-1] < history["loss"][0]
    assert set(history) >= {"R0.5", "R0.9"}
    reloaded = assert_reloads(model, inputs, tmp_path / "forecaster.keras")
    assert math.isfinite(reloaded.evaluate(inputs, targets, verbose=0)[0])


@pytest.mark.slow
def test_forecaster_trains_with_xla():
    _, _, history = _fit(_model(), jit_compile=True, epochs=4)
    assert history["loss"][-1] < history["loss"][0]
