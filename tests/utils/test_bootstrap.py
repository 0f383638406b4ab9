import numpy as np
import pytest

from keras_attn.utils import bootstrap_interval


def test_interval_is_the_percentiles_of_resampled_means():
    values = np.array([0.0, 1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 1.0])
    rng = np.random.default_rng(3)
    means = [values[rng.integers(0, 10, size=10)].mean() for _ in range(500)]
    expected = np.percentile(means, [5.0, 95.0])
    low, high = bootstrap_interval(values, resamples=500, confidence=0.9, seed=3)
    assert (low, high) == pytest.approx(tuple(expected))
    assert low < values.mean() < high


def test_columns_are_resampled_together():
    # Paired columns: the interval of each column is the interval of that column alone.
    values = np.stack([np.arange(20.0), np.arange(20.0) % 3], axis=1)  # (examples, 2)
    low, high = bootstrap_interval(values, resamples=300, seed=0)
    assert low.shape == high.shape == (2,)
    alone = bootstrap_interval(values[:, 1], resamples=300, seed=0)
    assert (low[1], high[1]) == pytest.approx(alone)


def test_constant_values_give_a_point_and_bad_arguments_fail():
    assert bootstrap_interval(np.full(7, 0.25)) == pytest.approx((0.25, 0.25))
    with pytest.raises(ValueError, match="Received: values with shape"):
        bootstrap_interval(np.zeros(0))
    with pytest.raises(ValueError, match="Received: resamples=0"):
        bootstrap_interval(np.ones(3), resamples=0)
    with pytest.raises(ValueError, match="Received: confidence=1.0"):
        bootstrap_interval(np.ones(3), confidence=1.0)
