import json

import keras
import numpy as np
import pytest

from keras_attn.analysis import diagonal_statistics, query_key_products, value_output_products
from keras_attn.initializers import MimeticInitializer, apply_mimetic_init
from keras_attn.initializers.mimetic_initializer import QUERY_KEY_STREAM, VALUE_OUTPUT_STREAM
from keras_attn.layers import LogSparseAttention, MultiHeadSelfAttention, TransformerBlock
from keras_attn.models import build_vision_transformer
from keras_attn.pruning import attention_layers

pytestmark = pytest.mark.backend_agnostic

DIM, HEADS, HEAD_DIM = 32, 4, 8


def _kernels(initializer, dim=DIM, heads=HEADS, head_dim=HEAD_DIM, layer_index=None):
    shapes = {
        "query": (dim, heads, head_dim),
        "key": (dim, heads, head_dim),
        "value": (dim, heads, head_dim),
        "output": (heads, head_dim, dim),
    }
    return {
        role: keras.ops.convert_to_numpy(getattr(initializer, role)(layer_index)(shape))
        for role, shape in shapes.items()
    }


def _targets(initializer, dim, heads, layer_index=0):
    """The paper's target matrices, drawn from the documented seed streams."""

    def generator(stream):
        sequence = np.random.SeedSequence(initializer.seed, spawn_key=(layer_index, stream))
        return np.random.default_rng(sequence)

    z1 = generator(QUERY_KEY_STREAM).standard_normal((heads, dim, dim)) / np.sqrt(dim)
    z2 = generator(VALUE_OUTPUT_STREAM).standard_normal((dim, dim)) / np.sqrt(dim)
    query_key = initializer.alpha1 * z1 + initializer.beta1 * np.eye(dim)
    value_output = initializer.alpha2 * z2 - initializer.beta2 * np.eye(dim)
    return query_key, value_output


def test_query_key_is_best_rank_head_dim_approximation_per_head():
    initializer = MimeticInitializer(seed=3)
    kernels = _kernels(initializer)
    products = query_key_products(kernels["query"], kernels["key"])  # (heads, d, d)
    targets, _ = _targets(initializer, DIM, HEADS)
    for head in range(HEADS):
        singular_values = np.linalg.svd(targets[head], compute_uv=False)
        # Eckart-Young: the Frobenius error of the best rank-k approximation
        # is the norm of the discarded singular values.
        expected_error = np.sqrt(np.sum(singular_values[HEAD_DIM:] ** 2))
        error = np.linalg.norm(products[head] - targets[head])
        np.testing.assert_allclose(error, expected_error, rtol=1e-4)
        assert np.linalg.matrix_rank(products[head], tol=1e-4) == HEAD_DIM


def test_query_key_factors_use_square_roots_of_singular_values():
    kernels = _kernels(MimeticInitializer(seed=1))
    for head in range(HEADS):
        query, key = kernels["query"][:, head], kernels["key"][:, head]
        # U sqrt(S) and V sqrt(S): both factors have the same column norms.
        np.testing.assert_allclose(
            np.linalg.norm(query, axis=0), np.linalg.norm(key, axis=0), rtol=1e-4
        )


def test_value_output_product_is_exact():
    initializer = MimeticInitializer(seed=5)
    kernels = _kernels(initializer)
    _, target = _targets(initializer, DIM, HEADS)
    product = value_output_products(kernels["value"], kernels["output"])
    np.testing.assert_allclose(product, target, atol=1e-5)


def test_identity_only_when_alphas_are_zero():
    initializer = MimeticInitializer(alpha1=0.0, beta1=1.0, alpha2=0.0, beta2=0.5, seed=0)
    kernels = _kernels(initializer, dim=8, heads=2, head_dim=4)
    np.testing.assert_allclose(
        value_output_products(kernels["value"], kernels["output"]), -0.5 * np.eye(8), atol=1e-6
    )
    products = query_key_products(kernels["query"], kernels["key"])
    for head in range(2):
        # A rank-4 part of the identity: a projection, symmetric and idempotent.
        np.testing.assert_allclose(products[head], products[head].T, atol=1e-6)
        np.testing.assert_allclose(products[head] @ products[head], products[head], atol=1e-5)
        np.testing.assert_allclose(np.trace(products[head]), 4.0, atol=1e-5)


def test_diagonal_and_off_diagonal_statistics_match_the_targets():
    dim, heads = 128, 4
    kernels = _kernels(MimeticInitializer(seed=0), dim=dim, heads=heads, head_dim=dim)
    query_key = diagonal_statistics(query_key_products(kernels["query"], kernels["key"]))
    value_output = diagonal_statistics(value_output_products(kernels["value"], kernels["output"]))
    # Full-rank heads reproduce alpha1 Z + beta1 I: diagonal beta1 (noise of
    # the mean 0.7 / d), off-diagonal spread alpha1 / sqrt(d).
    np.testing.assert_allclose(query_key["mean_diagonal"], 0.7, atol=0.03)
    np.testing.assert_allclose(query_key["offdiagonal_std"], 0.7 / np.sqrt(dim), rtol=0.03)
    np.testing.assert_allclose(value_output["mean_diagonal"], -0.4, atol=0.02)
    np.testing.assert_allclose(value_output["offdiagonal_std"], 0.4 / np.sqrt(dim), rtol=0.03)
    assert np.all(np.abs(query_key["offdiagonal_mean"]) < 0.01)


def test_diagonal_statistics_by_hand():
    matrix = np.array([[2.0, 1.0], [-1.0, 4.0]])
    stats = diagonal_statistics(matrix)
    assert stats["mean_diagonal"] == 3.0
    assert stats["offdiagonal_mean"] == 0.0
    assert stats["offdiagonal_std"] == 1.0
    assert stats["diagonal_score"] == 3.0


def test_heads_and_layers_are_independent():
    initializer = MimeticInitializer(seed=0)
    first, second = _kernels(initializer, layer_index=0), _kernels(initializer, layer_index=1)
    query = first["query"]
    for head in range(1, HEADS):
        assert not np.allclose(query[:, 0], query[:, head], atol=1e-3)
    for role in first:
        assert not np.allclose(first[role], second[role], atol=1e-3)


def test_same_seed_same_kernels_other_seed_other_kernels():
    first = _kernels(MimeticInitializer(seed=7))
    again = _kernels(MimeticInitializer(seed=7))
    other = _kernels(MimeticInitializer(seed=8))
    for role in first:
        np.testing.assert_array_equal(first[role], again[role])
        assert not np.allclose(first[role], other[role], atol=1e-3)


def test_seed_none_draws_one_seed_shared_by_the_members():
    initializer = MimeticInitializer()
    assert initializer.query().seed == initializer.key().seed == initializer.seed
    kernels = _kernels(initializer, dim=16, heads=2, head_dim=16)
    product = value_output_products(kernels["value"], kernels["output"])
    assert np.all(np.diag(product) < 0)


def test_inner_size_larger_than_dim_keeps_products_exact():
    initializer = MimeticInitializer(seed=2)
    kernels = _kernels(initializer, dim=8, heads=3, head_dim=12)
    query_key, value_output = _targets(initializer, 8, 3)
    np.testing.assert_allclose(
        query_key_products(kernels["query"], kernels["key"]), query_key, atol=1e-5
    )
    np.testing.assert_allclose(
        value_output_products(kernels["value"], kernels["output"]), value_output, atol=1e-5
    )


def test_serialization_round_trip_and_dtype():
    member = MimeticInitializer(alpha1=0.5, seed=4).key(layer_index=2)
    config = json.loads(json.dumps(keras.initializers.serialize(member)))
    restored = keras.initializers.deserialize(config)
    assert isinstance(restored, MimeticInitializer)
    assert restored.get_config() == member.get_config()
    assert restored.get_config()["role"] == "key" and restored.layer_index == 2
    np.testing.assert_array_equal(restored((8, 2, 4)), member((8, 2, 4)))
    assert keras.backend.standardize_dtype(member((8, 2, 4), dtype="float16").dtype) == "float16"


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"alpha1": -0.1}, "Received: alpha1=-0.1"),
        ({"beta1": float("nan")}, "Received: beta1=nan"),
        ({"alpha2": "big"}, "Received: alpha2='big'"),
        ({"beta2": True}, "Received: beta2=True"),
        ({"seed": -1}, "Received: seed=-1"),
        ({"seed": 1.5}, "Received: seed=1.5"),
        ({"layer_index": -2}, "Received: layer_index=-2"),
        ({"role": "gate"}, "Received: role='gate'"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        MimeticInitializer(**kwargs)


def test_bad_shapes_and_missing_role():
    with pytest.raises(ValueError, match=r"Received: shape=\(8, 4\)"):
        MimeticInitializer(seed=0).query()((8, 4))
    with pytest.raises(ValueError, match="Received: role=None"):
        MimeticInitializer(seed=0)((8, 2, 4))


def _products_of(layer):
    query_key = query_key_products(layer.query_dense.kernel, layer.key_dense.kernel)
    value_output = value_output_products(layer.value_dense.kernel, layer.output_dense.kernel)
    return query_key, value_output


@pytest.mark.parametrize("kind", ["keras", "core"])
def test_apply_to_built_attention_layers(kind):
    x = np.random.default_rng(0).normal(size=(2, 5, 16)).astype("float32")
    if kind == "keras":
        layer = keras.layers.MultiHeadAttention(num_heads=2, key_dim=8)
        layer(x, x)
    else:
        layer = MultiHeadSelfAttention(num_heads=2, key_dim=8)
        layer(x)
    layer.query_dense.bias.assign(np.ones((2, 8)))
    initializer = MimeticInitializer(seed=9)
    assert apply_mimetic_init(layer, initializer) == [layer]
    expected = _kernels(initializer, dim=16, heads=2, head_dim=8, layer_index=0)
    np.testing.assert_allclose(layer.query_dense.kernel, expected["query"], atol=1e-6)
    np.testing.assert_allclose(layer.output_dense.kernel, expected["output"], atol=1e-6)
    _, value_output = _products_of(layer)
    np.testing.assert_allclose(value_output, _targets(initializer, 16, 2)[1], atol=1e-5)
    for dense in (layer.query_dense, layer.key_dense, layer.value_dense, layer.output_dense):
        np.testing.assert_array_equal(dense.bias, np.zeros(dense.bias.shape))


def test_apply_to_vision_transformer_changes_only_attention():
    model = build_vision_transformer(
        (8, 8), 3, patch_size=4, hidden_dim=16, num_layers=3, num_heads=2
    )
    before = {w.path: keras.ops.convert_to_numpy(w) for w in model.weights}
    layers = apply_mimetic_init(model, MimeticInitializer(seed=0))
    assert [layer.path for layer in layers] == [f"block_{i}/attention" for i in range(3)]
    changed = {w.path for w in model.weights if not np.array_equal(before[w.path], w)}
    assert changed == {
        f"block_{i}/attention/{name}/kernel"
        for i in range(3)
        for name in ("query", "key", "value", "attention_output")
    }
    query_keys = [_products_of(layer)[0] for layer in layers]
    assert not np.allclose(query_keys[0], query_keys[1], atol=1e-3)
    for query_key in query_keys:
        assert np.all(diagonal_statistics(query_key)["mean_diagonal"] > 0.1)


def test_apply_with_default_initializer_and_nested_layers():
    inputs = keras.Input((4, 8))
    block = TransformerBlock(num_heads=2, intermediate_dim=8)
    model = keras.Model(inputs, block(keras.layers.Dense(8)(inputs)))
    assert list(attention_layers(model).values()) == [block.attention]
    assert attention_layers(block.attention) == {block.attention.name: block.attention}
    (layer,) = apply_mimetic_init(model)
    _, value_output = _products_of(layer)
    # A fresh seed: -beta2 I dominates the mean of the diagonal (noise 8 sd away), while
    # single entries alpha2 z / sqrt(8) - beta2 turn positive in ~2% of seeds.
    assert np.diag(value_output).mean() < 0


def test_layer_index_follows_the_blocks_of_a_nested_model():
    x = keras.Input((3, 8))
    blocks = [TransformerBlock(2, 8, name=f"block_{index}") for index in range(3)]
    inner = keras.Sequential([keras.Input((3, 8)), *blocks], name="inner")
    model = keras.Model(x, inner(keras.layers.Dense(8)(x)))
    initializer = MimeticInitializer(seed=1)
    layers = apply_mimetic_init(model, initializer)
    assert layers == [block.attention for block in blocks]
    for index, block in enumerate(blocks):
        expected = _kernels(initializer, dim=8, heads=2, head_dim=4, layer_index=index)
        query = keras.ops.convert_to_numpy(block.attention.query_dense.kernel)
        np.testing.assert_allclose(query, expected["query"], atol=1e-6)


def test_apply_rejects_unusable_models():
    with pytest.raises(ValueError, match="contains no MultiHeadAttention"):
        apply_mimetic_init(keras.layers.Dense(3))
    with pytest.raises(ValueError, match="Received: built=False"):
        apply_mimetic_init(MultiHeadSelfAttention(num_heads=2, key_dim=4))
    cross = keras.layers.MultiHeadAttention(num_heads=2, key_dim=4)
    cross(np.zeros((1, 3, 8)), np.zeros((1, 5, 6)))
    with pytest.raises(ValueError, match="Received: query=\\(8, 2, 4\\), key=\\(6, 2, 4\\)"):
        apply_mimetic_init(cross)
    with pytest.raises(ValueError, match="Received: initializer='glorot_uniform'"):
        apply_mimetic_init(cross, "glorot_uniform")


def _numpy_weights(model):
    return [keras.ops.convert_to_numpy(weight) for weight in model.weights]


def test_convolutional_query_and_key_get_the_mimetic_kernels_on_the_current_tap():
    x = keras.Input((6, 8))
    first = MultiHeadSelfAttention(2, 4, name="first")
    convolutional = LogSparseAttention(2, 4, kernel_size=3, name="convolutional")
    model = keras.Model(x, convolutional(first(x)))
    initializer = MimeticInitializer(seed=3)
    assert apply_mimetic_init(model, initializer) == [first, convolutional]
    expected = _kernels(initializer, dim=8, heads=2, head_dim=4, layer_index=1)
    for role in ("query", "key"):
        kernel = keras.ops.convert_to_numpy(getattr(convolutional, f"{role}_dense").kernel)
        assert kernel.shape == (3, 8, 2, 4)
        np.testing.assert_array_equal(kernel[:2], np.zeros((2, 8, 2, 4)))
        np.testing.assert_allclose(kernel[2], expected[role], atol=1e-6)
    # So the layer starts as its position-wise (kernel_size=1) version with those kernels.
    pointwise = LogSparseAttention(2, 4, name="pointwise")
    inputs = np.random.default_rng(1).normal(size=(2, 6, 8)).astype("float32")
    pointwise(inputs)
    pointwise.set_weights([w[-1] if w.ndim == 4 else w for w in _numpy_weights(convolutional)])
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(convolutional(inputs)),
        keras.ops.convert_to_numpy(pointwise(inputs)),
        atol=1e-5,
    )


def test_a_layer_that_cannot_be_handled_is_named_before_any_weight_changes():
    x, context = keras.Input((3, 8)), keras.Input((5, 6))
    attended = MultiHeadSelfAttention(2, 4, name="good")(x)
    cross = keras.layers.MultiHeadAttention(2, 4, name="cross")
    model = keras.Model([x, context], cross(attended, context))
    before = _numpy_weights(model)
    with pytest.raises(ValueError, match="Layer 'cross'.*Received: query=\\(8, 2, 4\\)"):
        apply_mimetic_init(model, MimeticInitializer(seed=0))
    for old, new in zip(before, _numpy_weights(model), strict=True):
        np.testing.assert_array_equal(old, new)


class _KerasAttentionModel(keras.Model):
    """A subclassed model on `keras.layers.MultiHeadAttention`."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.attentions = [keras.layers.MultiHeadAttention(2, 4, name=f"mha_{i}") for i in range(2)]

    def call(self, x):
        for attention in self.attentions:
            x = attention(x, x)
        return x


def test_apply_to_keras_hub_backbones_and_a_subclassed_keras_model(keras_hub_backbone):
    subclassed = _KerasAttentionModel()
    subclassed(np.zeros((1, 3, 8), "float32"))
    models = {name: keras_hub_backbone(name) for name in ("bert", "gpt2", "vit")}
    models["subclassed"] = subclassed
    initializer = MimeticInitializer(seed=2)
    for name, model in models.items():
        before = {id(w): keras.ops.convert_to_numpy(w) for w in model.weights}
        layers = apply_mimetic_init(model, initializer)
        assert layers == list(attention_layers(model).values()) and len(layers) == 2, name
        attention_weights = {id(w) for layer in layers for w in layer.weights}
        for weight in model.weights:
            if id(weight) not in attention_weights:
                np.testing.assert_array_equal(before[id(weight)], weight)
        for index, layer in enumerate(layers):
            expected = _kernels(initializer, dim=8, heads=2, head_dim=4, layer_index=index)
            for role in ("query", "output"):
                kernel = keras.ops.convert_to_numpy(getattr(layer, f"{role}_dense").kernel)
                np.testing.assert_allclose(kernel, expected[role], atol=1e-6, err_msg=name)


def test_member_as_kernel_initializer_of_einsum_dense():
    initializer = MimeticInitializer(seed=1)
    query = keras.layers.EinsumDense(
        "abc,cde->abde", (None, 2, 4), kernel_initializer=initializer.query()
    )
    key = keras.layers.EinsumDense(
        "abc,cde->abde", (None, 2, 4), kernel_initializer=initializer.key()
    )
    query.build((1, 3, 8))
    key.build((1, 3, 8))
    expected = _kernels(initializer, dim=8, heads=2, head_dim=4)
    np.testing.assert_allclose(query.kernel, expected["query"], atol=1e-6)
    np.testing.assert_allclose(key.kernel, expected["key"], atol=1e-6)
    restored = keras.layers.EinsumDense.from_config(key.get_config())
    assert restored.kernel_initializer.get_config() == initializer.key().get_config()
