"""One argument vocabulary, KerasHub's, in every public layer and builder.

`hidden_dim` is the model width, `intermediate_dim` the MLP hidden size,
`num_layers` the number of blocks and `num_heads`/`key_dim` the heads, as in
Keras' `MultiHeadAttention`. Layers whose config keys were renamed still load
configs saved with the retired keys (older `.keras` files).
"""

import importlib
import inspect
import json
import zipfile

import keras
import numpy as np
import pytest

from keras_attn.layers import (
    PatchEmbedding,
    PositionEmbedding,
    T2TModule,
    TokenTransformer,
    TransformerBlock,
)
from keras_attn.models import (
    build_bsarec,
    build_decoder_language_model,
    build_exact_first_transformer,
    build_exact_parity_transformer,
    build_logsparse_forecaster,
)
from keras_attn.recommendation import leave_one_out_split

RETIRED = {
    "dim",
    "embed_dim",
    "depth",
    "mlp_dim",
    "mlp",
    "mlp_ratio",
    "num_blocks",
    "norm_first",
    "epsilon",
    "max_length",
}
PACKAGES = (
    "layers",
    "models",
    "analysis",
    "forecasting",
    "pruning",
    "pretrained",
    "recommendation",
    "interop",
)


def _public_callables():
    for package in PACKAGES:
        module = importlib.import_module(f"keras_attn.{package}")
        for name in module.__all__:
            value = getattr(module, name)
            if callable(value):
                yield f"{package}.{name}", value.__init__ if inspect.isclass(value) else value


def test_no_public_layer_or_builder_takes_a_retired_argument_name():
    parameters = {
        name: set(inspect.signature(function).parameters) for name, function in _public_callables()
    }
    assert len(parameters) > 50
    assert {"hidden_dim", "intermediate_dim", "num_layers"} <= parameters[
        "models.build_vision_transformer"
    ]
    retired = {name: sorted(RETIRED & names) for name, names in parameters.items()}
    assert {name: names for name, names in retired.items() if names} == {}


# Layer, arguments, the renamed argument, its retired config key and the
# retired key's value that gives the same layer.
RENAMED = {
    "PatchEmbedding": (PatchEmbedding, {"patch_size": 2, "hidden_dim": 8}, "hidden_dim", "dim", 8),
    "T2TModule": (T2TModule, {"hidden_dim": 8, "token_dim": 4}, "hidden_dim", "embed_dim", 8),
    # The retired `mlp_ratio` was a multiple of `token_dim`: 2.0 * 8 = 16 units.
    "TokenTransformer": (
        TokenTransformer,
        {"token_dim": 8, "intermediate_dim": 16},
        "intermediate_dim",
        "mlp_ratio",
        2.0,
    ),
    "TransformerBlock": (
        TransformerBlock,
        {"num_heads": 2, "intermediate_dim": 16},
        "intermediate_dim",
        "mlp_dim",
        16,
    ),
    "TransformerBlock normalize_first": (
        TransformerBlock,
        {"num_heads": 2, "intermediate_dim": 16, "normalize_first": False},
        "normalize_first",
        "norm_first",
        False,
    ),
    "PositionEmbedding": (
        PositionEmbedding,
        {"max_sequence_length": 6},
        "max_sequence_length",
        "max_length",
        6,
    ),
}


def _retired_config(name):
    layer_class, arguments, new_key, old_key, old_value = RENAMED[name]
    config = layer_class(**arguments).get_config()
    old = {key: value for key, value in config.items() if key != new_key}
    return layer_class, config, {**old, old_key: old_value}


@pytest.mark.parametrize("name", sorted(RENAMED))
def test_a_config_with_the_retired_key_loads(name):
    layer_class, config, old = _retired_config(name)
    assert layer_class.from_config(old).get_config() == config
    serialized = keras.saving.serialize_keras_object(layer_class.from_config(config))
    loaded = keras.saving.deserialize_keras_object({**serialized, "config": old})
    assert type(loaded) is layer_class and loaded.get_config() == config


@pytest.mark.parametrize("name", sorted(RENAMED))
def test_a_config_with_both_names_raises(name):
    layer_class, config, old = _retired_config(name)
    old_key = RENAMED[name][3]
    with pytest.raises(ValueError, match=f"`{old_key}`.*Received:"):
        layer_class.from_config({**config, old_key: old[old_key]})


@pytest.mark.parametrize("name", sorted(RENAMED))
def test_a_bad_value_names_the_new_argument(name):
    layer_class, arguments, new_key, _, _ = RENAMED[name]
    with pytest.raises(ValueError, match=f"`{new_key}`.*Received: {new_key}=0"):
        layer_class(**{**arguments, new_key: 0})


RETIRED_KEYS = {
    "PatchEmbedding": [("hidden_dim", "dim")],
    "PositionEmbedding": [("max_sequence_length", "max_length")],
    "TransformerBlock": [("intermediate_dim", "mlp_dim"), ("normalize_first", "norm_first")],
}


def _retire_keys(config):
    """Renames, in place, the new keys of the layers of `RETIRED_KEYS` back to their old names."""
    if isinstance(config, list):
        for item in config:
            _retire_keys(item)
    if not isinstance(config, dict):
        return
    if config.get("class_name") in RETIRED_KEYS:
        for new, old in RETIRED_KEYS[config["class_name"]]:
            config["config"][old] = config["config"].pop(new)
    for value in config.values():
        _retire_keys(value)


def _with_retired_keys(path, retired_path):
    """A copy of the `.keras` file at `path` whose config uses the retired keys."""
    with zipfile.ZipFile(path) as source, zipfile.ZipFile(retired_path, "w") as target:
        for item in source.infolist():
            data = source.read(item.filename)
            if item.filename == "config.json":
                config = json.loads(data)
                _retire_keys(config)
                data = json.dumps(config).encode("utf-8")
                assert b'"mlp_dim"' in data and b'"norm_first"' in data and b'"max_length"' in data
                assert b"intermediate_dim" not in data and b"normalize_first" not in data
            target.writestr(item, data)


def test_a_keras_file_saved_with_the_retired_keys_loads_with_its_weights(tmp_path):
    images = keras.Input((8, 8, 1))
    tokens = PatchEmbedding(4, 8)(images)  # (batch, 4, 8)
    tokens = PositionEmbedding(4)(tokens)
    outputs = TransformerBlock(2, 16, normalize_first=False)(tokens)
    model = keras.Model(images, outputs)
    model.save(tmp_path / "model.keras")
    _with_retired_keys(tmp_path / "model.keras", tmp_path / "retired.keras")
    loaded = keras.models.load_model(tmp_path / "retired.keras")
    x = np.random.default_rng(0).normal(size=(2, 8, 8, 1)).astype("float32")
    np.testing.assert_allclose(loaded(x), model(x), rtol=1e-6, atol=1e-6)
    assert loaded.layers[-1].intermediate_dim == 16 and loaded.layers[1].hidden_dim == 8
    assert loaded.layers[-1].normalize_first is False and loaded.layers[2].max_sequence_length == 4


# Constructors and builders whose argument was renamed: the retired keyword
# still works for one release, with a `DeprecationWarning`.
DEPRECATED_KEYWORDS = {
    "TransformerBlock": (
        lambda **kw: TransformerBlock(2, 8, **kw).normalize_first,
        "norm_first",
        "normalize_first",
        False,
    ),
    "PositionEmbedding": (
        lambda **kw: PositionEmbedding(**kw).max_sequence_length,
        "max_length",
        "max_sequence_length",
        5,
    ),
    "build_decoder_language_model": (
        lambda **kw: (
            build_decoder_language_model(10, hidden_dim=8, num_layers=1, num_heads=2, **kw)
            .get_layer("position_embedding")
            .max_sequence_length
        ),
        "max_length",
        "max_sequence_length",
        5,
    ),
    "build_logsparse_forecaster": (
        lambda **kw: (
            build_logsparse_forecaster(hidden_dim=8, num_layers=1, num_heads=2, **kw)
            .get_layer("position_embedding")
            .max_sequence_length
        ),
        "max_length",
        "max_sequence_length",
        5,
    ),
    "build_bsarec": (
        lambda **kw: build_bsarec(10, hidden_dim=8, num_layers=1, **kw).input_shape[1],
        "max_length",
        "max_sequence_length",
        5,
    ),
    "leave_one_out_split": (
        lambda **kw: leave_one_out_split([np.arange(1, 9)], **kw).valid_inputs.shape[1],
        "max_length",
        "max_sequence_length",
        5,
    ),
    "build_exact_parity_transformer": (
        lambda **kw: build_exact_parity_transformer(layer_norm=True, **kw).layers[-2].epsilon,
        "epsilon",
        "layer_norm_epsilon",
        1e-3,
    ),
    "build_exact_first_transformer": (
        lambda **kw: build_exact_first_transformer(layer_norm=True, **kw).layers[-2].epsilon,
        "epsilon",
        "layer_norm_epsilon",
        1e-3,
    ),
}


@pytest.mark.parametrize("name", sorted(DEPRECATED_KEYWORDS))
def test_a_retired_keyword_still_works_with_a_deprecation_warning(name):
    build, old, new, value = DEPRECATED_KEYWORDS[name]
    with pytest.warns(DeprecationWarning, match=f"`{old}` is deprecated.*`{new}`"):
        assert build(**{old: value}) == value
    assert build(**{new: value}) == value
    with pytest.raises(ValueError, match=f"give only `{new}`. Received: {old}="):
        build(**{old: value, new: value})


def test_the_retired_norm_first_attribute_still_reads_normalize_first():
    with pytest.warns(DeprecationWarning, match="`norm_first` is deprecated"):
        assert TransformerBlock(2, 8, normalize_first=False).norm_first is False
