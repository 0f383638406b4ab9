import keras
import numpy as np
import pytest

from keras_attn.forecasting import (
    Z90,
    autoregressive_forecast,
    calendar_covariates,
    forecast_band,
    longest_window_within,
    make_windows,
    path_quantiles,
    planned_attention_bytes,
    quantile_risks,
    rho_risks,
    sample_path_forecast,
    sample_window_starts,
    seasonal_naive,
    train_forecaster,
)
from keras_attn.models import build_logsparse_forecaster


def test_calendar_covariates():
    stamps = np.array(["2024-01-01T00", "2024-01-01T23", "2024-01-02T05"], "datetime64[h]")
    covariates = calendar_covariates(stamps)
    assert covariates["hour_of_day"].tolist() == [0, 23, 5]
    assert covariates["day_of_week"].tolist() == [0, 0, 1]  # a Monday, then Tuesday
    sunday = calendar_covariates(np.array(["2024-01-07T12"], "datetime64[h]"))
    assert sunday["day_of_week"].tolist() == [6]


def test_windows_by_hand():
    values = np.arange(1.0, 21.0)
    covariates = {"hour_of_day": np.arange(20).astype("int32") % 24}
    inputs, targets, scales = make_windows(values, covariates, [3, 10], 4, 2)
    # The window starting at index 3 holds 4..9; its scale is the mean of 4..7.
    np.testing.assert_allclose(scales, [5.5, 12.5])
    np.testing.assert_allclose(targets[0], np.arange(4.0, 10.0) / 5.5, rtol=1e-6)
    np.testing.assert_allclose(inputs["lagged_target"][0, :, 0], np.arange(3.0, 9.0) / 5.5)
    assert inputs["lagged_target"].shape == (2, 6, 1)
    assert inputs["hour_of_day"][1].tolist() == list(range(10, 16))
    with pytest.raises(ValueError, match="Received: starts with minimum 0"):
        make_windows(values, covariates, [0, 3], 4, 2)


def test_seasonal_naive_and_band():
    values = np.arange(1.0, 31.0)
    assert seasonal_naive(values, [20], 3, season=5).tolist() == [[16.0, 17.0, 18.0]]
    low, high = forecast_band(np.array([1.0, 2.0]), np.array([0.5, 0.0]))
    np.testing.assert_allclose(low, [1.0 - 0.5 * Z90, 2.0])
    np.testing.assert_allclose(high, [1.0 + 0.5 * Z90, 2.0])


def test_rho_risks_by_hand():
    actual = np.array([[2.0, 4.0], [1.0, 3.0]])
    mean = np.array([[1.0, 5.0], [1.0, 2.0]])
    risks = rho_risks(actual, mean, np.zeros_like(mean))
    # Point forecasts: the pinball losses are (rho - 1{x <= x_hat}) (x - x_hat).
    errors = actual - mean
    for rho in (0.5, 0.9):
        pinball = np.where(errors >= 0, rho * errors, (rho - 1) * errors)
        expected = 2 * pinball.sum() / np.abs(actual).sum()
        assert risks[f"R{rho:g}"] == pytest.approx(expected, rel=1e-6)


def test_window_starts_stay_before_the_end():
    starts = sample_window_starts(50, 10, 500, seed=3)
    assert starts.min() >= 1 and starts.max() + 10 <= 50
    assert set(starts.tolist()) == set(range(1, 41))  # every start is drawn
    np.testing.assert_array_equal(starts, sample_window_starts(50, 10, 500, seed=3))
    with pytest.raises(ValueError, match="Received: train_end=10"):
        sample_window_starts(10, 10, 5)


def _plus_one_model():
    """Mean = lagged input + 1 (scaled units), standard deviation 1: causal by construction."""
    lagged = keras.Input((None, 1), name="lagged_target")
    mean = keras.layers.Rescaling(1.0, offset=1.0)(lagged)
    params = keras.layers.Concatenate()([mean, keras.ops.ones_like(lagged)])
    return keras.Model(lagged, params)


def test_autoregressive_forecast_feeds_the_mean_back():
    rng = np.random.default_rng(0)
    values = rng.uniform(1.0, 3.0, 60)
    origins, context, horizon = np.array([20, 35]), 8, 5
    future_hidden = values.copy()
    future_hidden[origins[0] :] = np.nan  # the first forecast must not read its future
    model = _plus_one_model()
    mean, scale = autoregressive_forecast(model, future_hidden, {}, origins[:1], context, horizon)
    # By hand: scale s = mean |z| of the context; step h predicts z[origin - 1] + (h + 1) s.
    s = np.abs(values[origins[0] - context : origins[0]]).mean()
    expected = values[origins[0] - 1] + s * np.arange(1, horizon + 1)
    np.testing.assert_allclose(mean[0], expected, rtol=1e-5)
    np.testing.assert_allclose(scale[0], np.full(horizon, s), rtol=1e-5)
    both, _ = autoregressive_forecast(model, values, {}, origins, context, horizon)
    assert both.shape == (2, horizon)
    np.testing.assert_allclose(both[0], mean[0], rtol=1e-6)


@pytest.mark.usefixtures("eager_tensorflow_steps")
def test_train_forecaster_reads_only_the_training_part():
    stamps = np.arange(400).astype("datetime64[h]")
    values = 1.0 + np.sin(np.arange(400) * 2 * np.pi / 24)
    values[300:] = np.nan  # a window reading these would give a NaN loss
    keras.utils.set_random_seed(0)
    model = build_logsparse_forecaster(
        max_sequence_length=36, hidden_dim=4, num_heads=1, num_layers=1
    )
    info = train_forecaster(
        model, values, calendar_covariates(stamps), 300, 24, 12, windows=16, epochs=2
    )
    assert np.isfinite(info["final_train_nll"])
    assert info["parameters"] == model.count_params() and info["train_seconds"] > 0


def test_sample_paths_have_the_random_walks_quantiles():
    """Sampled paths of a random walk: step h is z + (h+1) s + s sqrt(h+1) N(0, 1).

    Feeding back the mean instead (the mean path) gives a spread of s at every step, which
    this check rejects: the deliberately wrong decoder below fails it.
    """
    from scipy.stats import norm

    rng = np.random.default_rng(1)
    values = rng.uniform(1.0, 3.0, 60)
    origins, context, horizon = np.array([20, 40]), 8, 6
    hidden = values.copy()
    hidden[origins[-1] :] = np.nan  # the forecasts read no step at or after their origin
    hidden[origins[0] : origins[0] + horizon] = np.nan
    model = _plus_one_model()  # a Gaussian random walk with drift 1 (scaled units)
    paths = sample_path_forecast(model, hidden, {}, origins, context, horizon, num_paths=4000)
    assert paths.shape == (2, 4000, horizon) and np.isfinite(paths).all()
    quantiles = path_quantiles(paths, (0.1, 0.5, 0.9))
    steps = np.arange(1, horizon + 1)
    for index, origin in enumerate(origins):
        s = np.abs(values[origin - context : origin]).mean()
        for level, forecast in quantiles.items():
            expected = values[origin - 1] + s * steps + s * np.sqrt(steps) * norm.ppf(level)
            error = np.abs(forecast[index] - expected) / (s * np.sqrt(steps))
            assert error.max() < 0.1, (level, error)
    # The mean path's Gaussian quantiles keep a spread of s: they miss the later steps.
    mean, scale = autoregressive_forecast(model, values, {}, origins, context, horizon)
    wrong = mean[0] + scale[0] * norm.ppf(0.9)
    s = np.abs(values[origins[0] - context : origins[0]]).mean()
    assert np.abs(wrong - quantiles[0.9][0])[-1] > 0.5 * s
    again = sample_path_forecast(model, hidden, {}, origins, context, horizon, num_paths=4000)
    np.testing.assert_array_equal(again, paths)  # seeded


def test_quantile_risks_equal_point_rho_risks():
    actual = np.array([[2.0, 4.0], [1.0, 3.0]])
    forecast = {0.5: np.array([[1.0, 5.0], [1.0, 2.0]]), 0.9: np.array([[3.0, 5.0], [2.0, 4.0]])}
    risks = quantile_risks(actual, forecast)
    for rho, point in forecast.items():
        errors = actual - point
        pinball = np.where(errors >= 0, rho * errors, (rho - 1) * errors)
        assert risks[f"R{rho:g}"] == pytest.approx(
            2 * pinball.sum() / np.abs(actual).sum(), rel=1e-6
        )


def test_longest_window_within():
    assert longest_window_within(100, {24: 40, 48: 100, 72: 150}) == 48
    with pytest.raises(ValueError, match="Received: budget_bytes=10"):
        longest_window_within(10, {24: 40})


def test_planned_attention_memory_full_grows_quadratically_logsparse_not():
    """XLA's plan (JAX, in a subprocess under other backends) of one attention layer's step."""
    lengths = [128, 256]
    full = planned_attention_bytes(lengths, "full", hidden_dim=8, num_heads=4, batch_size=8)
    sparse = planned_attention_bytes(
        lengths, "logsparse", hidden_dim=8, num_heads=4, local_window=4, batch_size=8
    )
    # Full attention's scores are (batch, heads, L, L): at these sizes that part
    # dominates, so doubling L multiplies the plan by more than 3.
    assert full[256] > 3 * full[128]
    assert sparse[256] < 2.5 * sparse[128]
    assert sparse[256] < full[256] / 4


def test_budget_bisection_finds_the_longest_fitting_length(monkeypatch):
    from keras_attn.forecasting import memory

    monkeypatch.setattr(memory, "_plan_one", lambda length, **layer: length * length)
    lengths = list(range(10, 200, 7))
    for budget in (100, 2209, 10_000, 10**9):
        plans = memory._plan(lengths, budget_bytes=budget)
        assert len(plans) <= 5  # bisection, not all 27 lengths
        expected = max(length for length in lengths if length * length <= budget)
        assert longest_window_within(budget, plans) == expected
    with pytest.raises(ValueError, match="budget_bytes=50"):
        longest_window_within(50, memory._plan(lengths, budget_bytes=50))
