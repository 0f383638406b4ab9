"""`GaussianNegativeLogLikelihood` against its formula, and through its config."""

import keras
import numpy as np
import pytest

from keras_attn.losses import GaussianNegativeLogLikelihood

pytestmark = pytest.mark.backend_agnostic


def test_gaussian_nll_matches_the_formula():
    y_true = np.array([[1.0, -2.0], [0.5, 3.0]], "float32")
    y_pred = np.array([[[0.0, 1.0], [-1.0, 2.0]], [[0.5, 0.1], [1.0, 4.0]]], "float32")
    mean, sigma = y_pred[..., 0], y_pred[..., 1]
    expected = np.log(sigma) + 0.5 * np.log(2 * np.pi) + 0.5 * ((y_true - mean) / sigma) ** 2
    loss = GaussianNegativeLogLikelihood()
    assert float(loss(y_true, y_pred)) == pytest.approx(expected.mean(), rel=1e-6)
    assert float(loss(y_true[..., None], y_pred)) == pytest.approx(expected.mean(), rel=1e-6)
    unreduced = GaussianNegativeLogLikelihood(reduction=None)(y_true, y_pred)
    np.testing.assert_allclose(unreduced, expected, rtol=1e-6)


def test_loss_survives_its_config_and_serialization():
    loss = GaussianNegativeLogLikelihood(reduction="sum", name="nll")
    clone = GaussianNegativeLogLikelihood.from_config(loss.get_config())
    assert (clone.reduction, clone.name) == ("sum", "nll")
    restored = keras.losses.deserialize(keras.losses.serialize(loss))
    assert type(restored) is GaussianNegativeLogLikelihood
    y_true, y_pred = np.array([[1.0]]), np.array([[[0.0, 2.0]]])
    expected = np.log(2.0) + 0.5 * np.log(2 * np.pi) + 0.5 * 0.25
    assert float(restored(y_true, y_pred)) == pytest.approx(expected, rel=1e-6)
