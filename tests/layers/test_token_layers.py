import math

import numpy as np
import pytest

from keras_attn.layers import T2TModule, TokenPerformer, TokenTransformer
from keras_attn.testing import LayerChecks
from keras_attn.testing.arrays import assert_allclose, assert_array_equal, to_numpy
from keras_attn.testing.reference import softmax

pytestmark = pytest.mark.backend_agnostic

TOKEN_BAD_ARGUMENTS = [{"token_dim": 0}, {"dropout": 1.0}]


def _token_transformer_params(dim, token_dim):
    """Two norms, bias-free query/key/value, output projection and MLP."""
    return 2 * dim + 3 * dim * token_dim + 2 * token_dim + 3 * (token_dim + 1) * token_dim


PERFORMER_CHECKS = LayerChecks(
    TokenPerformer,
    {"token_dim": 8, "seed": 1},
    input_shape=(2, 6, 12),
    expected_output_shape=(2, 6, 8),
    bad_init_kwargs=[*TOKEN_BAD_ARGUMENTS, {"kernel_ratio": 0.05}],
    # Two norms, key-query-value, projection and MLP, 4 random features.
    num_params=2 * 12 + (12 + 1) * 24 + 2 * 8 + 3 * (8 + 1) * 8 + 4 * 8,
)
TRANSFORMER_CHECKS = LayerChecks(
    TokenTransformer,
    {"token_dim": 8},
    input_shape=(2, 6, 12),
    expected_output_shape=(2, 6, 8),
    bad_init_kwargs=[*TOKEN_BAD_ARGUMENTS, {"intermediate_dim": 0}],
    num_params=_token_transformer_params(12, 8),
)
MODULE_CHECKS = LayerChecks(
    T2TModule,
    {
        "hidden_dim": 12,
        "token_layer": "transformer",
        "token_dim": 4,
        "kernel_sizes": (3, 2, 1),
        "strides": (2, 1, 1),
        "paddings": (1, 0, 0),
    },
    input_shape=(2, 6, 6, 2),
    expected_output_shape=(2, 4, 12),
    dynamic_axes=(),
    bad_init_kwargs=[
        {"token_layer": "lstm"},
        {"hidden_dim": 0},
        {"strides": (2, 2)},
        {"kernel_sizes": (3, 0, 1)},
        {"strides": (0, 1, 1)},
        {"paddings": (3, 0, 0)},
    ],
    # Token layers on 2 * 3 * 3 and 4 * 2 * 2 features, then the projection.
    num_params=_token_transformer_params(18, 4) + _token_transformer_params(16, 4) + 5 * 12,
)


test_performer_contract = LayerChecks.contract_test(PERFORMER_CHECKS)


test_transformer_contract = LayerChecks.contract_test(TRANSFORMER_CHECKS)


test_t2t_module_contract = LayerChecks.contract_test(MODULE_CHECKS)


def _inputs(shape=(2, 7, 12), seed=0):
    return np.random.default_rng(seed).normal(size=shape).astype("float32")


def _randomise(layer, seed=1):
    """Random biases and norm parameters, so that the reference checks every term."""
    rng = np.random.default_rng(seed)
    for weight in layer.trainable_weights:
        weight.assign(rng.normal(scale=0.3, size=weight.shape).astype("float32"))


def layer_norm(x, norm, epsilon=1e-5):
    mean = x.mean(-1, keepdims=True)
    variance = x.var(-1, keepdims=True)
    return (x - mean) / np.sqrt(variance + epsilon) * to_numpy(norm.gamma) + to_numpy(norm.beta)


def gelu(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / np.sqrt(2)))


def dense(x, layer):
    return x @ to_numpy(layer.kernel) + to_numpy(layer.bias)


def mlp(y, layer):
    return y + dense(gelu(dense(layer_norm(y, layer.mlp_norm), layer.mlp_hidden)), layer.mlp_output)


def test_transformer_token_layer_matches_numpy_reference():
    x = _inputs()
    layer = TokenTransformer(token_dim=5)
    layer(x)
    _randomise(layer)
    attention = layer.attention
    assert attention.query_dense.bias is None and attention.output_dense.bias is not None
    normed = layer_norm(x, layer.attention_norm)
    wq, wk, wv = (
        to_numpy(d.kernel)[:, 0]
        for d in (attention.query_dense, attention.key_dense, attention.value_dense)
    )
    q, k, v = normed @ wq, normed @ wk, normed @ wv  # (batch, length, 5) each
    # The official code scales by the input size (12), not by the token size (5).
    weights = softmax(q @ k.transpose(0, 2, 1) / np.sqrt(12))
    output_kernel = to_numpy(attention.output_dense.kernel)[0]
    y = v + (weights @ v) @ output_kernel + to_numpy(attention.output_dense.bias)
    assert_allclose(layer(x), mlp(y, layer), atol=1e-4)


def test_performer_token_layer_matches_numpy_reference():
    x = _inputs()
    layer = TokenPerformer(token_dim=6, seed=3)
    layer(x)
    _randomise(layer)
    k, q, v = np.split(dense(layer_norm(x, layer.attention_norm), layer.key_query_value), 3, -1)
    w = to_numpy(layer.random_features)  # (3, 6)

    def phi(u):
        return np.exp(u @ w.T - (u * u).sum(-1, keepdims=True) / 2) / np.sqrt(3)

    # Linear attention = kernelised softmax attention over all keys.
    kernel = phi(q) @ phi(k).transpose(0, 2, 1)  # (batch, length, length)
    attended = kernel @ v / (kernel.sum(-1, keepdims=True) + 1e-8)
    y = v + dense(attended, layer.projection)
    assert_allclose(layer(x), mlp(y, layer), rtol=1e-4, atol=1e-4)


def test_performer_random_features_are_orthogonal_frozen_and_seeded():
    layer = TokenPerformer(token_dim=8, seed=5)
    layer(_inputs(shape=(1, 3, 4)))
    w = to_numpy(layer.random_features)
    assert w.shape == (4, 8)
    assert_allclose(w @ w.T, 4.0 * np.eye(4), atol=1e-4)
    assert not layer.random_features.trainable
    assert len(layer.trainable_weights) == 12
    same = TokenPerformer(token_dim=8, seed=5)
    same(_inputs(shape=(1, 3, 4)))
    assert_array_equal(to_numpy(same.random_features), w)


def test_performer_approximates_softmax_attention_with_many_features():
    """With many random features, phi(q).phi(k) estimates exp(q.k) (Choromanski et al.)."""
    rng = np.random.default_rng(0)
    q, k = rng.normal(scale=0.3, size=(2, 16))
    layer = TokenPerformer(token_dim=16, kernel_ratio=64.0, seed=0)
    layer.build((1, 1, 4))
    features = to_numpy(layer.positive_features(np.stack([q, k])[None]))[0]
    estimate = features[0] @ features[1]
    assert_allclose(estimate, np.exp(q @ k), rtol=0.15)


def test_t2t_module_follows_the_paper_steps():
    images = _inputs(shape=(2, 16, 16, 3))
    module = T2TModule(hidden_dim=10, token_dim=4)
    tokens = module(images)
    assert module.grids(16, 16) == [(4, 4), (2, 2), (1, 1)]
    assert tokens.shape == (2, 1, 10)
    x = module.soft_splits[0](images)  # (2, 16, 147)
    x = module.token_layers[0](x)
    x = module.soft_splits[1](np.reshape(to_numpy(x), (2, 4, 4, 4)))
    x = module.token_layers[1](x)
    x = module.soft_splits[2](np.reshape(to_numpy(x), (2, 2, 2, 4)))
    assert_allclose(tokens, module.projection(x), atol=1e-5)


def test_t2t_module_rejects_too_small_images():
    with pytest.raises(ValueError, match="Received: input_shape"):
        T2TModule(hidden_dim=8, token_dim=4)(np.zeros((1, 2, 2, 3), "float32"))
