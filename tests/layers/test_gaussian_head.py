import keras
import numpy as np
import pytest

from keras_attn.layers import GaussianHead
from keras_attn.testing import LayerChecks

pytestmark = pytest.mark.backend_agnostic

CHECKS = LayerChecks(
    GaussianHead,
    {"min_scale": 0.01},
    input_shape=(2, 6, 8),
    expected_output_shape=(2, 6, 2),
    num_params=(8 + 1) * 2,
    bad_init_kwargs=[{"min_scale": -1.0}, {"min_scale": 0.0}, {"min_scale": "0"}],
)


test_layer_contract = LayerChecks.contract_test(CHECKS)


def test_mean_and_softplus_scale_from_the_dense_layer():
    head = GaussianHead(min_scale=0.5)
    x = np.random.default_rng(0).normal(size=(3, 4, 5)).astype("float32")
    params = keras.ops.convert_to_numpy(head(x))
    raw = x @ keras.ops.convert_to_numpy(head.dense.kernel) + keras.ops.convert_to_numpy(
        head.dense.bias
    )
    np.testing.assert_allclose(params[..., 0], raw[..., 0], atol=1e-6)
    np.testing.assert_allclose(params[..., 1], np.log1p(np.exp(raw[..., 1])) + 0.5, atol=1e-6)
    assert np.all(params[..., 1] > 0.5)
