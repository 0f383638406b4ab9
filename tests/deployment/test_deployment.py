"""Exporting and serving: SavedModel, ONNX and LiteRT, compared with the Keras model.

The default run exports one small model that holds many public layers by
every path of the backend, and checks that the upstream limits of a plain
model are still there; the slow run exports every public layer and model
builder by every path (`deployment_matrix.CASES`).
"""

import re

import keras
import numpy as np
import pytest
from deployment_matrix import ATOL, CASES, PATHS, check, upstream_limit

from keras_attn import layers

pytestmark = pytest.mark.backend_agnostic
BACKEND = keras.backend.backend()


def _paths_of_this_backend():
    return [path for path, (backends, _) in PATHS.items() if BACKEND in backends]


def _working_paths_of_this_backend():
    """The paths of this backend that no upstream limit stops for every model."""
    return [path for path in _paths_of_this_backend() if upstream_limit("*", path, BACKEND) is None]


def _many_layers_model():
    """One small functional model through many public layers, and its inputs."""
    inputs = keras.Input(shape=(6, 8), name="inputs")
    x = layers.FourierFilter(cutoff=3)(inputs)
    x = layers.PositionEmbedding(max_sequence_length=6)(x)  # `ops.arange`, which jax2onnx must read
    x = layers.MultiHeadSelfAttention(2, 4, attention_pattern="causal")(x)
    x = layers.ConvolutionalSelfAttention(2, 4, kernel_size=3)(x)
    x = layers.TransformerBlock(num_heads=2, intermediate_dim=16)(x)  # exact GELU
    x = layers.ClassToken()(x)
    outputs = layers.GaussianHead()(x)
    data = np.random.default_rng(0).normal(size=(2, 6, 8)).astype("float32")
    return keras.Model(inputs, outputs), data


@pytest.mark.parametrize("path", _working_paths_of_this_backend())
def test_a_model_of_many_layers_serves_the_same_outputs(path, tmp_path):
    keras.utils.set_random_seed(0)
    model, data = _many_layers_model()
    expected = keras.ops.convert_to_numpy(model(data))  # ONNX exports a model once called.
    served = PATHS[path][1](model, data, tmp_path)(data)
    served = served[0] if isinstance(served, list) else served
    np.testing.assert_allclose(keras.ops.convert_to_numpy(served), expected, atol=ATOL)


@pytest.mark.parametrize("path", _paths_of_this_backend())
@pytest.mark.parametrize(
    "case", ["FourierFilter at unknown length", "LogSparseAttention at unknown length"]
)
def test_fourier_filter_and_log_sparse_attention_serve_any_length(case, path, tmp_path):
    """Exported at an unknown length, served at two lengths (ONNX from JAX, LiteRT)."""
    limited = upstream_limit(case, path, BACKEND) is not None
    assert check(case, path, tmp_path) == ("upstream limit" if limited else "works")


def _dense_model(activation=None):
    inputs = keras.Input(shape=(4,), name="inputs")
    return keras.Model(inputs, keras.layers.Dense(3, activation=activation)(inputs))


def _assert_upstream_error(like, path, model, data, tmp_path):
    """Exporting `model` by `path` raises the upstream error listed for case `like`."""
    pattern, _ = upstream_limit(like, path, BACKEND)
    model(data)
    with pytest.raises(Exception) as caught:
        PATHS[path][1](model, data, tmp_path)(data)
    assert re.search(pattern, f"{caught.type.__name__}: {caught.value}", re.DOTALL)


@pytest.mark.skipif(BACKEND != "torch", reason="The SavedModel export of the torch backend.")
def test_saved_model_from_torch_fails_upstream_even_for_a_dense_model(tmp_path):
    data = np.ones((2, 4), "float32")
    _assert_upstream_error("ClassToken", "saved_model", _dense_model(), data, tmp_path)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="tf2onnx converts TensorFlow graphs.")
def test_onnx_from_tensorflow_still_fails_upstream_on_keras_exact_gelu(tmp_path):
    """tf2onnx writes `Erfc`, which is why the layers write their GELU without it."""
    data = np.ones((2, 4), "float32")
    model = _dense_model("gelu")
    model(data)
    with pytest.raises(Exception, match=r"Erfc"):
        PATHS["onnx"][1](model, data, tmp_path)


@pytest.mark.skipif(BACKEND != "tensorflow", reason="LiteRT converts TensorFlow graphs.")
def test_litert_serves_causal_and_log_sparse_attention_at_an_unknown_length(tmp_path):
    """The causal mask and the LogSparse offsets convert to LiteRT builtins, no Flex op."""
    inputs = keras.Input(shape=(None, 8), name="inputs")
    x = layers.MultiHeadSelfAttention(2, 4, attention_pattern="causal")(inputs)
    outputs = layers.LogSparseAttention(2, 4, variant="local", local_window=2)(x)
    model = keras.Model(inputs, outputs)
    data = np.random.default_rng(0).normal(size=(2, 9, 8)).astype("float32")
    serve = PATHS["litert"][1](model, data, tmp_path)
    for length in (9, 6):  # exported once, served at two lengths
        expected = keras.ops.convert_to_numpy(model(data[:, :length]))
        served = serve(data[:, :length])
        served = served[0] if isinstance(served, list) else served
        np.testing.assert_allclose(served, expected, atol=ATOL)


@pytest.mark.skipif(BACKEND != "torch", reason="torch.onnx exports the torch backend.")
def test_onnx_from_torch_with_an_unknown_batch_fails_upstream_on_a_layer_norm(tmp_path):
    """Without a static `input_signature`, Keras takes torch's TorchScript exporter."""
    inputs = keras.Input(shape=(3, 4), name="inputs")
    model = keras.Model(inputs, keras.layers.LayerNormalization()(inputs))
    model(np.ones((2, 3, 4), "float32"))
    with pytest.raises(Exception, match=r"Failed to export a node .*onnx::Gather"):
        model.export(str(tmp_path / "model.onnx"), format="onnx", verbose=False)


@pytest.mark.slow
@pytest.mark.parametrize("path", _paths_of_this_backend())
@pytest.mark.parametrize("case", sorted(CASES))
def test_every_layer_and_builder(case, path, tmp_path):
    limited = upstream_limit(case, path, BACKEND) is not None
    assert check(case, path, tmp_path) == ("upstream limit" if limited else "works")


@pytest.mark.skipif(BACKEND != "torch", reason="torch's native kernels run eagerly only.")
def test_onnx_export_from_torch_traces_the_reference_kernels(tmp_path, monkeypatch):
    """The eager call runs the native kernels; the exported graph holds the references."""
    import importlib

    native = importlib.import_module("keras_attn.kernels._torch").NATIVE
    calls = []
    for name, kernel in list(native.items()):

        def counted(*args, name=name, kernel=kernel, **kwargs):
            calls.append(name)
            return kernel(*args, **kwargs)

        monkeypatch.setitem(native, name, counted)
    inputs = keras.Input(shape=(9, 8), name="inputs")
    x = layers.MultiHeadSelfAttention(2, 4, attention_pattern="causal")(inputs)
    model = keras.Model(inputs, layers.LogSparseAttention(2, 4)(x))
    data = np.random.default_rng(0).normal(size=(2, 9, 8)).astype("float32")
    expected = keras.ops.convert_to_numpy(model(data))
    assert calls == ["dense_attention", "offset_attention"]
    served = PATHS["onnx"][1](model, data, tmp_path)(data)[0]
    assert calls == ["dense_attention", "offset_attention"]  # none while exporting
    np.testing.assert_allclose(served, expected, atol=ATOL)
