"""The deployment matrix: every public layer and model builder, exported and served.

Each case builds a small model and its test inputs; each path exports the
model (`model.export`) and serves it with its runtime (TensorFlow,
ONNX Runtime, the TFLite interpreter). A model whose sequence length is
unknown (`keras.Input((None, d))`: the builders that take any length and
the layer cases `at unknown length`) is exported once and served at two
lengths. `check(case, path)` compares the served outputs with the Keras
model's to 1e-4, or, where an upstream tool is the limit
(`UPSTREAM_LIMITS`), asserts today's error.

Run the whole matrix on the three backends and write its outcome:

    python tests/deployment/deployment_matrix.py results/deployment-matrix.json
"""

import json
import os
import re
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

import keras
import numpy as np

from keras_attn import layers
from keras_attn.models import (
    AdaViT,
    build_bert_encoder,
    build_bit_string_classifier,
    build_bsarec,
    build_decoder_language_model,
    build_exact_first_transformer,
    build_exact_parity_transformer,
    build_logsparse_forecaster,
    build_sasrec,
    build_t2t_vit,
    build_vision_transformer,
)

ATOL = 1e-4
BACKENDS = ("tensorflow", "jax", "torch")
# A model of unknown length is also served this many positions shorter.
SHORTER_BY = 2


def _floats(shape, seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _ints(shape, high, seed=0):
    return np.random.default_rng(seed).integers(0, high, size=shape).astype("int32")


def _layer_model(layer, data, **extra):
    """A functional model around `layer`, called on `data` and keyword inputs `extra`."""
    main = keras.Input(shape=data.shape[1:], dtype=str(data.dtype), name="inputs")
    extra_inputs = {
        name: keras.Input(shape=value.shape[1:], dtype=str(value.dtype), name=name)
        for name, value in extra.items()
    }
    outputs = layer(main, **extra_inputs)
    model_inputs = [main, *extra_inputs.values()] if extra else main
    return keras.Model(model_inputs, outputs), [data, *extra.values()] if extra else data


def _blockwise_causal_attention():
    """Causal attention on the blockwise path from 8 positions, on every backend."""
    layer = layers.MultiHeadSelfAttention(2, 4, attention_pattern="causal")
    layer.blockwise_min_length = 8
    layer.blockwise_block_size = 4
    layer.blockwise_key_block_size = 3
    return layer


def _vit():
    return build_vision_transformer(
        (8, 8), 3, patch_size=4, hidden_dim=8, num_layers=2, num_heads=2
    )


def _adavit():
    model = AdaViT(_vit(), gate_bias=0.4, seed=0)
    images = _floats((2, 8, 8))
    model(images)
    return model, images


def _bert():
    model = build_bert_encoder(50, num_layers=2, num_heads=2, hidden_dim=8, intermediate_dim=16)
    padding_mask = np.array([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]], "int32")
    inputs = {
        "token_ids": _ints((2, 5), 50) * padding_mask,
        "padding_mask": padding_mask,
        "segment_ids": np.zeros((2, 5), "int32"),
    }
    return model, inputs


def _forecaster():
    model = build_logsparse_forecaster(
        max_sequence_length=12,
        hidden_dim=8,
        num_heads=2,
        num_layers=2,
        local_window=3,
        kernel_size=3,
    )
    inputs = {
        "lagged_target": _floats((2, 12, 1)),
        "hour_of_day": _ints((2, 12), 24),
        "day_of_week": _ints((2, 12), 7),
    }
    return model, inputs


# name -> function returning `(model, inputs)`, at a small size.
LAYER_CASES = {
    "BitStringFeatures": lambda: _layer_model(
        layers.BitStringFeatures("parity", width=6, mirrored=True), _ints((2, 7), 3)
    ),
    "BSARecBlock": lambda: _layer_model(
        layers.BSARecBlock(num_heads=2, alpha=0.7, cutoff=3), _floats((2, 6, 8))
    ),
    "ClassToken": lambda: _layer_model(layers.ClassToken(), _floats((2, 5, 4))),
    "ConvolutionalSelfAttention": lambda: _layer_model(
        layers.ConvolutionalSelfAttention(2, 4, kernel_size=4, output_dim=5), _floats((2, 7, 8))
    ),
    "FourierFilter": lambda: _layer_model(layers.FourierFilter(cutoff=3), _floats((2, 6, 8))),
    "GaussianHead": lambda: _layer_model(layers.GaussianHead(), _floats((2, 6, 8))),
    "GumbelSigmoidGate": lambda: _layer_model(
        layers.GumbelSigmoidGate(3, threshold=0.6, seed=1), _floats((2, 6, 8))
    ),
    "LearnedScalePositions": lambda: _layer_model(
        layers.LearnedScalePositions(width=6), _ints((2, 7), 3)
    ),
    "LogSparseAttention": lambda: _layer_model(
        layers.LogSparseAttention(2, 4, variant="local", local_window=2, kernel_size=3),
        _floats((2, 9, 8)),
        head_mask=_floats((2, 2), seed=1),
    ),
    "MultiHeadSelfAttention": lambda: _layer_model(
        layers.MultiHeadSelfAttention(2, 4, attention_pattern="causal"),
        _floats((2, 6, 8)),
        head_mask=_floats((2, 2), seed=1),
    ),
    "MultiHeadSelfAttention(blockwise causal)": lambda: _layer_model(
        _blockwise_causal_attention(), _floats((2, 11, 8))
    ),
    "MultiHeadSelfAttention(LogSparsePattern, attention_mask)": lambda: _layer_model(
        layers.MultiHeadSelfAttention(2, 4, attention_pattern=layers.LogSparsePattern()),
        _floats((2, 9, 8)),
        attention_mask=_ints((2, 9, 9), 2, seed=2).astype(bool),
    ),
    "MultiHeadSelfAttention(CausalWindowPattern)": lambda: _layer_model(
        layers.MultiHeadSelfAttention(
            2, 4, attention_pattern=layers.CausalWindowPattern(window=3), logit_scale="log_length"
        ),
        _floats((2, 6, 8)),
    ),
    "PatchEmbedding": lambda: _layer_model(
        layers.PatchEmbedding(patch_size=4, hidden_dim=6), _floats((2, 8, 12, 3))
    ),
    "PositionEmbedding": lambda: _layer_model(
        layers.PositionEmbedding(max_sequence_length=12), _floats((2, 5, 4))
    ),
    "SinCosPositionEmbedding1D": lambda: _layer_model(
        layers.SinCosPositionEmbedding1D(), _floats((2, 5, 6))
    ),
    "SinCosPositionEmbedding2D": lambda: _layer_model(
        layers.SinCosPositionEmbedding2D(grid_size=(2, 3), num_prefix_tokens=1),
        _floats((2, 7, 8)),
    ),
    "SoftSplit": lambda: _layer_model(
        layers.SoftSplit(kernel_size=3, stride=2, padding=1), _floats((2, 6, 5, 2))
    ),
    "T2TModule": lambda: _layer_model(
        layers.T2TModule(
            hidden_dim=12,
            token_layer="performer",
            token_dim=4,
            kernel_sizes=(3, 2, 1),
            strides=(2, 1, 1),
            paddings=(1, 0, 0),
        ),
        _floats((2, 6, 6, 2)),
    ),
    "TokenPerformer": lambda: _layer_model(
        layers.TokenPerformer(token_dim=8, seed=1), _floats((2, 6, 12))
    ),
    "TokenTransformer": lambda: _layer_model(
        layers.TokenTransformer(token_dim=8), _floats((2, 6, 12))
    ),
    "TransformerBlock": lambda: _layer_model(
        layers.TransformerBlock(num_heads=2, intermediate_dim=16),
        _floats((2, 5, 8)),
        head_mask=_floats((2, 2), seed=1),
    ),
}
MODEL_CASES = {
    "AdaViT": _adavit,
    "build_bert_encoder": _bert,
    "build_bit_string_classifier": lambda: (
        build_bit_string_classifier("parity", num_heads=2, positions="learned_scale"),
        _ints((2, 7), 3),
    ),
    "build_bsarec": lambda: (
        build_bsarec(50, max_sequence_length=6, hidden_dim=16),
        _ints((2, 6), 51),
    ),
    "build_decoder_language_model": lambda: (
        build_decoder_language_model(20, 8, hidden_dim=8, num_layers=2, num_heads=2),
        _ints((2, 8), 20),
    ),
    "build_exact_first_transformer": lambda: (
        build_exact_first_transformer(layer_norm=True),
        _ints((2, 7), 2),
    ),
    "build_exact_parity_transformer": lambda: (
        build_exact_parity_transformer(layer_norm=True),
        _ints((2, 7), 2),
    ),
    "build_logsparse_forecaster": _forecaster,
    "build_sasrec": lambda: (
        build_sasrec(50, max_sequence_length=6, hidden_dim=16),
        _ints((2, 6), 51),
    ),
    "build_t2t_vit": lambda: (
        build_t2t_vit(
            (12, 12, 1),
            3,
            hidden_dim=16,
            num_layers=1,
            num_heads=2,
            intermediate_dim=32,
            token_dim=4,
            kernel_sizes=(3, 3, 3),
            strides=(2, 1, 1),
            paddings=(1, 1, 1),
        ),
        _floats((2, 12, 12, 1)),
    ),
    "build_vision_transformer": lambda: (_vit(), _floats((2, 8, 8))),
}
# The layer cases that take a sequence of any length, each also built on
# inputs of unknown length (`"<case> at unknown length"`).
SEQUENCE_LAYER_CASES = (
    "BitStringFeatures",
    "BSARecBlock",
    "ClassToken",
    "ConvolutionalSelfAttention",
    "FourierFilter",
    "GaussianHead",
    "GumbelSigmoidGate",
    "LearnedScalePositions",
    "LogSparseAttention",
    "MultiHeadSelfAttention",
    "MultiHeadSelfAttention(blockwise causal)",
    "MultiHeadSelfAttention(LogSparsePattern, attention_mask)",
    "MultiHeadSelfAttention(CausalWindowPattern)",
    "PositionEmbedding",
    "TokenPerformer",
    "TokenTransformer",
    "TransformerBlock",
)


def _at_unknown_length(case):
    """The layer of `LAYER_CASES[case]` called on inputs whose length axes are unknown."""

    def build():
        model, inputs = LAYER_CASES[case]()
        arrays = inputs if isinstance(inputs, list) else [inputs]
        length = arrays[0].shape[1]
        unknown = [
            keras.Input(
                shape=tuple(None if size == length else size for size in x.shape[1:]),
                dtype=str(x.dtype),
                name=tensor.name,
            )
            for tensor, x in zip(model.inputs, arrays, strict=True)
        ]
        extra = {tensor.name: tensor for tensor in unknown[1:]}
        outputs = model.layers[-1](unknown[0], **extra)
        return keras.Model(unknown if extra else unknown[0], outputs), inputs

    return build


UNKNOWN_LENGTH_CASES = {
    f"{case} at unknown length": _at_unknown_length(case) for case in SEQUENCE_LAYER_CASES
}
CASES = {**LAYER_CASES, **UNKNOWN_LENGTH_CASES, **MODEL_CASES}


def _flat_outputs(outputs):
    """Outputs as a list of numpy arrays, dict outputs ordered by key."""
    if isinstance(outputs, dict):
        outputs = [outputs[key] for key in sorted(outputs)]
    return [np.asarray(keras.ops.convert_to_numpy(x)) for x in keras.tree.flatten(outputs)]


def _feed(model, inputs, names):
    """`{runtime input name: array}`, by the model's input names where the runtime has them."""
    if not isinstance(inputs, dict):
        arrays = inputs if isinstance(inputs, list) else [inputs]
        model_names = [tensor.name for tensor in keras.tree.flatten(getattr(model, "inputs", []))]
        known = sorted(model_names) == sorted(names)
        inputs = dict(zip(model_names if known else names, arrays, strict=True))
    return {name: inputs[name] for name in names}


def _input_shapes(model, inputs):
    """The model's shape of each input, as a list in the order of `inputs`' arrays."""
    tensors = keras.tree.flatten(getattr(model, "inputs", None) or [])
    if isinstance(inputs, dict):
        by_name = {tensor.name: tuple(tensor.shape) for tensor in tensors}
        return [by_name.get(name) for name in inputs]
    count = len(inputs) if isinstance(inputs, list) else 1
    return [tuple(tensor.shape) for tensor in tensors] if len(tensors) == count else [None] * count


def shorter_inputs(model, inputs):
    """`inputs` cut by `SHORTER_BY` positions on each unknown axis, or `None` if none is."""
    shapes = _input_shapes(model, inputs)
    if not any(shape and None in shape[1:] for shape in shapes):
        return None

    def cut(x, shape):
        if shape is None:
            return x
        kept = (slice(0, -SHORTER_BY) if size is None else slice(None) for size in shape[1:])
        return x[(slice(None), *kept)]  # the batch whole

    if isinstance(inputs, dict):
        return {
            name: cut(x, shape) for (name, x), shape in zip(inputs.items(), shapes, strict=True)
        }
    if isinstance(inputs, list):
        return [cut(x, shape) for x, shape in zip(inputs, shapes, strict=True)]
    return cut(inputs, shapes[0])


def serve_saved_model(model, inputs, folder):
    """Exports `model` and returns the function that serves inputs with the export."""
    import tensorflow as tf

    path = str(folder / "saved_model")
    model.export(path, format="tf_saved_model", verbose=False)
    reloaded = tf.saved_model.load(path)  # Owns the variables: keep it while serving.
    return lambda x: reloaded.serve(x)


def _static_signature(inputs):
    """The input signature of exactly these inputs, batch included, as `model.export` takes it."""
    if isinstance(inputs, dict):
        return [
            {
                name: keras.InputSpec(shape=x.shape, dtype=str(x.dtype), name=name)
                for name, x in inputs.items()
            }
        ]
    arrays = inputs if isinstance(inputs, list) else [inputs]
    specs = [keras.InputSpec(shape=x.shape, dtype=str(x.dtype)) for x in arrays]
    return [specs] if len(specs) > 1 else specs


def serve_onnx(model, inputs, folder):
    """ONNX Runtime's outputs; on torch, exported at the inputs' shape, as Keras requires."""
    import onnxruntime

    path = str(folder / "model.onnx")
    signature = _static_signature(inputs) if keras.backend.backend() == "torch" else None
    model.export(path, format="onnx", verbose=False, input_signature=signature)
    session = onnxruntime.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [node.name for node in session.get_inputs()]
    return lambda x: session.run(None, _feed(model, x, names))


def serve_litert(model, inputs, folder):
    import tensorflow as tf

    path = str(folder / "model.tflite")
    model.export(path, format="litert", verbose=False)
    interpreter = tf.lite.Interpreter(model_path=path)
    runner = interpreter.get_signature_runner()

    def serve(x):
        outputs = runner(**_feed(model, x, list(runner.get_input_details())))
        return [outputs[key] for key in sorted(outputs)]

    return serve


# path -> (the backends it exports from, the function that exports a model and
# returns the function that serves inputs with the export).
PATHS = {
    "saved_model": (("tensorflow", "jax", "torch"), serve_saved_model),
    "onnx": (("tensorflow", "jax", "torch"), serve_onnx),
    "litert": (("tensorflow",), serve_litert),
}


def _limits(cases, path, backend, pattern, workaround):
    return {(case, path, backend): (pattern, workaround) for case in cases}


def _at_any_length(*cases):
    """Each case and its twin at an unknown length."""
    return tuple(name for case in cases for name in (case, f"{case} at unknown length"))


# The builders whose inputs take any length, served at two lengths.
ANY_LENGTH_BUILDERS = (
    "build_bert_encoder",
    "build_bit_string_classifier",
    "build_decoder_language_model",
    "build_exact_first_transformer",
    "build_exact_parity_transformer",
    "build_logsparse_forecaster",
)
# jax2onnx cannot take these apart (the standalone position layers export).
JAX2ONNX_DYNAMIC_LENGTH = (
    "BitStringFeatures at unknown length",
    "BSARecBlock at unknown length",
    "LearnedScalePositions at unknown length",
    "PositionEmbedding at unknown length",
    "build_bit_string_classifier",
    "build_decoder_language_model",
    "build_exact_first_transformer",
    "build_exact_parity_transformer",
)
SPARSE_PATTERNS = ("LogSparseAttention", "MultiHeadSelfAttention(CausalWindowPattern)")
SEVERAL_SEQUENCE_INPUTS = (
    "MultiHeadSelfAttention(LogSparsePattern, attention_mask) at unknown length",
    "build_bert_encoder",
    "build_logsparse_forecaster",
)
CAUSAL_AT_UNKNOWN_LENGTH = tuple(
    f"{case} at unknown length"
    for case in (
        "ConvolutionalSelfAttention",
        "MultiHeadSelfAttention",
        "MultiHeadSelfAttention(blockwise causal)",
    )
)
# (case, path, backend) -> (pattern of "ErrorType: message", workaround): what
# an upstream tool raises today. `check` asserts it, so an entry fails (and
# must go) once the tool lifts the limit. `("*", path, backend)` is every case.
UPSTREAM_LIMITS = {
    ("*", "saved_model", "torch"): (
        r"mismatch between the structure of `inputs` and `dynamic_shapes`"
        r"|object has no attribute 'shape'",
        "Keras exports a SavedModel from torch through torch.export and torch_xla, and its "
        "torch.export call fails; save a `.keras` file on torch and export it from TensorFlow "
        "or JAX, or export ONNX from torch.",
    ),
    **_limits(
        JAX2ONNX_DYNAMIC_LENGTH,
        "onnx",
        "jax",
        # In `build_decoder_language_model` the sentinel that jax2onnx gives the
        # length of `ops.arange` does not broadcast against the input's length.
        r"AttributeError: .*_DynamicDimSentinel"
        r"|incompatible shapes for broadcasting: .*JAX2ONNX_DYNAMIC_DIM_SENTINEL",
        "jax2onnx cannot index with the model's unknown sequence length inside these models "
        "('_DynamicDimSentinel' has no 'rmax'); export ONNX from TensorFlow or torch.",
    ),
    **_limits(
        SEVERAL_SEQUENCE_INPUTS,
        "onnx",
        "jax",
        r"Incompatible shapes for broadcasting|a symbol of its own",
        "Keras gives every unknown sequence axis of a JAX export its own symbol, so inputs "
        "that share a length do not add; export ONNX from torch.",
    ),
    **_limits(
        SEVERAL_SEQUENCE_INPUTS,
        "saved_model",
        "jax",
        r"incompatible shapes for broadcasting|a symbol of its own",
        "Keras gives every unknown sequence axis of a JAX export its own symbol; pass "
        "`jax2tf_kwargs={'polymorphic_shapes': ...}` with one symbol for the shared length, "
        "or export from TensorFlow.",
    ),
    **_limits(
        (*UNKNOWN_LENGTH_CASES, *ANY_LENGTH_BUILDERS),
        "onnx",
        "torch",
        r"InvalidArgument: .*Got invalid dimensions for input",
        "Keras exports ONNX from torch at the static shape of `input_signature` (without one "
        "it takes torch's TorchScript exporter, which fails on the layer norm): export once "
        "per serving length, or export ONNX from TensorFlow or JAX.",
    ),
    **_limits(
        CAUSAL_AT_UNKNOWN_LENGTH,
        "onnx",
        "jax",
        r"NotImplementedError: jax.nn.dot_product_attention with is_causal=True requires static",
        "jax2onnx lowers `jax.nn.dot_product_attention` with `is_causal=True` (Keras' causal "
        "attention on JAX) at static lengths only; export ONNX from TensorFlow, or from JAX "
        "at a static length.",
    ),
    **_limits(
        ("TokenPerformer at unknown length",),
        "litert",
        "tensorflow",
        r"Select TensorFlow op\(s\).*FlexStridedSlice",
        "At an unknown length the LiteRT converter keeps a `StridedSlice` of this layer as a "
        "TensorFlow op; export at a static length, or serve the file with a LiteRT runtime "
        "linked with the Flex delegate.",
    ),
}


def upstream_limit(case, path, backend):
    """The `(error pattern, workaround)` of a known upstream limit, or None."""
    return UPSTREAM_LIMITS.get((case, path, backend)) or UPSTREAM_LIMITS.get(("*", path, backend))


def check(case, path, folder):
    """Exports `case` by `path` on the current backend and compares what it serves.

    Returns:
        `"works"`, or `"upstream limit"` when the known upstream error was
        raised. Raises an `AssertionError` on any other outcome.
    """
    backend = keras.backend.backend()
    keras.utils.set_random_seed(0)
    model, inputs = CASES[case]()
    shorter = shorter_inputs(model, inputs)
    input_sets = [inputs] if shorter is None else [inputs, shorter]
    expected = [_flat_outputs(model(x, training=False)) for x in input_sets]
    limit = upstream_limit(case, path, backend)
    try:
        serve = PATHS[path][1](model, inputs, Path(folder))
        served = [_flat_outputs(serve(x)) for x in input_sets]
    except Exception as error:
        if limit is None:
            raise
        message = f"{type(error).__name__}: {error}"
        assert re.search(limit[0], message, re.DOTALL), (
            f"{case} by {path} on {backend}: expected an error matching {limit[0]!r}, got {message}"
        )
        return "upstream limit"
    assert limit is None, f"{case} by {path} on {backend} works now: remove its upstream limit."
    for served_outputs, expected_outputs in zip(served, expected, strict=True):
        assert len(served_outputs) == len(expected_outputs)
        for actual, wanted in zip(served_outputs, expected_outputs, strict=True):
            np.testing.assert_allclose(actual.reshape(wanted.shape), wanted, atol=ATOL, rtol=0)
    return "works"


def _run_backend():
    """Every case by every path of this backend: `{path: {case: outcome}}` as JSON lines."""
    backend = keras.backend.backend()
    outcomes = {}
    for path, (backends, _) in PATHS.items():
        if backend not in backends:
            continue
        for case in CASES:
            with tempfile.TemporaryDirectory() as folder:
                try:
                    outcome = {"outcome": check(case, path, folder)}
                except Exception as error:
                    lines = traceback.format_exception_only(type(error), error)
                    outcome = {"outcome": "fails", "error": "".join(lines).strip()[-2000:]}
            limit = upstream_limit(case, path, backend)
            if outcome["outcome"] == "upstream limit":
                outcome["workaround"] = limit[1]
            outcomes.setdefault(path, {})[case] = outcome
            print(json.dumps({"path": path, "case": case, **outcome}), file=sys.stderr)
    return outcomes


def main(out):
    from keras_attn.utils import write_benchmark

    started_at = time.time()
    results = {}
    # Each backend in its own process, importing this checkout's keras_attn.
    root = str(Path(__file__).resolve().parents[2])
    python_path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    for backend in BACKENDS:
        env = {**os.environ, "KERAS_BACKEND": backend, "PYTHONPATH": python_path}
        finished = subprocess.run(
            [sys.executable, __file__, "--this-backend"],
            env=env,
            stdout=subprocess.PIPE,
            check=True,
            text=True,
        )
        results[backend] = json.loads(finished.stdout.strip().splitlines()[-1])
    write_benchmark(Path(out), results, started_at=started_at)


if __name__ == "__main__":
    if sys.argv[1:] == ["--this-backend"]:
        print(json.dumps(_run_backend()))
    else:
        main(sys.argv[1])
