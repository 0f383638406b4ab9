"""Probabilistic forecasting of a series with a Gaussian-output model.

The pipeline of the LogSparse Transformer (Li et al., NeurIPS 2019) and
DeepAR as reusable functions: calendar covariates and scaled training
windows of one series, training a forecaster on random windows with the
Gaussian negative log-likelihood, rolling autoregressive forecasts (the
mean path or sample paths), the planned attention memory that sets a window
under a memory budget, and their scores (R0.5/R0.9 against a seasonal-naive
forecast). Any Keras model that maps the window inputs to `(batch, length, 2)` means and standard
deviations works, for example `keras_attn.models.build_logsparse_forecaster`.
"""

from keras_attn.forecasting.decoding import (
    autoregressive_forecast,
    path_quantiles,
    sample_path_forecast,
)
from keras_attn.forecasting.evaluation import (
    Z90,
    forecast_band,
    quantile_risks,
    rho_risks,
    seasonal_naive,
)
from keras_attn.forecasting.memory import (
    longest_window_within,
    planned_attention_bytes,
    windows_within_budget,
)
from keras_attn.forecasting.training import sample_window_starts, train_forecaster
from keras_attn.forecasting.windows import calendar_covariates, make_windows

__all__ = [
    "Z90",
    "autoregressive_forecast",
    "calendar_covariates",
    "forecast_band",
    "longest_window_within",
    "make_windows",
    "path_quantiles",
    "planned_attention_bytes",
    "quantile_risks",
    "rho_risks",
    "sample_path_forecast",
    "sample_window_starts",
    "seasonal_naive",
    "train_forecaster",
    "windows_within_budget",
]
