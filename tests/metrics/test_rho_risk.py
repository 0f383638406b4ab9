"""`RhoRisk`, the rho-quantile risk, against hand computations."""

import numpy as np
import pytest

from keras_attn.metrics import RhoRisk

pytestmark = pytest.mark.backend_agnostic


def test_rho_risk_matches_a_hand_computation():
    y_true = np.array([[10.0, 20.0, 30.0]])
    mean = np.array([[12.0, 15.0, 30.0]])
    sigma = np.array([[1.0, 2.0, 0.0]])
    params = np.stack([mean, sigma], axis=-1)
    # R0.5: the mean is the median; 2 * (0.5 * 2 + 0.5 * 5 + 0) / 60.
    r50 = RhoRisk(0.5)
    r50.update_state(y_true, params)
    assert float(r50.result()) == pytest.approx(2 * (1.0 + 2.5) / 60, rel=1e-6)
    # R0.9: quantiles mean + 1.2815516 * sigma.
    z = 1.2815515655446004
    q = mean + z * sigma
    expected = 2 * ((1 - 0.9) * (q[0, 0] - 10) + 0.9 * (20 - q[0, 1]) + 0.0) / 60
    r90 = RhoRisk(0.9)
    r90.update_state(y_true, params)
    assert float(r90.result()) == pytest.approx(expected, rel=1e-6)
    assert r90.name == "R0.9"


def test_rho_risk_is_a_ratio_of_totals_with_weights_and_reset():
    metric = RhoRisk(0.5)
    metric.update_state(np.array([10.0]), np.array([[8.0, 0.0]]))  # error 2, |x| 10
    metric.update_state(np.array([1.0, 5.0]), np.array([[2.0, 0.0], [5.0, 0.0]]))  # 1, 6
    assert float(metric.result()) == pytest.approx(2 * 0.5 * 3 / 16)
    metric.reset_state()
    metric.update_state(
        np.array([10.0, 1.0]), np.array([[8.0, 0.0], [2.0, 0.0]]), sample_weight=np.array([1, 0])
    )
    assert float(metric.result()) == pytest.approx(2 * 0.5 * 2 / 10)
    assert RhoRisk.from_config(metric.get_config()).rho == 0.5
    with pytest.raises(ValueError, match="Received: rho=1.0"):
        RhoRisk(1.0)
