"""The NumPy softmax and log-softmax that references and analyses share."""

import numpy as np

from keras_attn.utils.numpy_math import log_softmax, softmax


def test_softmax_matches_the_definition_on_any_axis():
    logits = np.array([[0.0, 1.0, 2.0], [3.0, 3.0, -1.0]])
    for axis in (0, 1):
        exp = np.exp(logits)
        np.testing.assert_allclose(softmax(logits, axis), exp / exp.sum(axis, keepdims=True))


def test_large_logits_stay_finite():
    np.testing.assert_allclose(softmax(np.array([1000.0, 1000.0 + np.log(3.0)])), [0.25, 0.75])
    np.testing.assert_allclose(log_softmax(np.array([1000.0, 1000.0])), np.log([0.5, 0.5]))


def test_log_softmax_is_the_log_of_softmax():
    logits = np.random.default_rng(0).normal(size=(4, 5))
    np.testing.assert_allclose(log_softmax(logits), np.log(softmax(logits)), atol=1e-12)
