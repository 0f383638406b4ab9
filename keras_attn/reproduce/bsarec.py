"""BSARec vs SASRec on MovieLens-100K (Shin et al., AAAI 2024).

Both models are trained the same way (softmax cross-entropy over all items at
the last position, Adam, the same epochs budget and early stopping on
validation NDCG@20) for several seeds, then tested leave-one-out with full
ranking: HR@5/10/20 and NDCG@5/10/20, mean and standard deviation. BSARec's
alpha and c are first chosen on validation NDCG@20 over a grid (seed 0,
optionally on the first `--grid-users` users and `--grid-epochs` epochs).
"""

import os
import time

import keras
import numpy as np

from keras_attn.models import build_bsarec, build_sasrec
from keras_attn.recommendation import (
    RankingEarlyStopping,
    evaluate_full_ranking,
    movielens_100k_split,
)
from keras_attn.reproduce._run import choose_setting, finish, mean_and_std
from keras_attn.utils.training import build_optimizer
from keras_attn.utils.validation import float_option, int_option

NAME = "bsarec"
HELP = "BSARec vs SASRec next-item recommendation on MovieLens-100K."
MODELS = ("SASRec", "BSARec")
COLORS = {"SASRec": "tab:gray", "BSARec": "tab:blue"}
METRICS = ("HR@5", "NDCG@5", "HR@10", "NDCG@10", "HR@20", "NDCG@20")
# Fast: a quick check, also the KERAS_ATTN_SMALL size (the slow test runs it with 1
# seed and 1 epoch). Full: the official training budget, hours on 2 CPU cores.
SETTINGS = {
    "fast": {"users": 200, "seeds": 2, "epochs": 2, "patience": 2, "max_length": 20},
    "full": {"users": None, "seeds": 3, "epochs": 200, "patience": 10, "max_length": 50},
}
# The official grid; `--alphas` / `--cutoffs` run a part of it.
ALPHAS = (0.1, 0.3, 0.5, 0.7, 0.9)
CUTOFFS = (1, 3, 5, 7, 9)
# Measured (benchmarks/bsarec_training.py): XLA speeds BSARec's training up
# and slows SASRec's down on CPU; "auto" picks the faster per model.
AUTO_JIT = {"SASRec": False, "BSARec": True}


def add_arguments(parser):
    parser.add_argument(
        "--seeds", type=int_option(), help="Number of seeds N: runs seeds 0..N-1 (fast 2, full 3)."
    )
    parser.add_argument(
        "--epochs", type=int_option(), help="Most epochs per run (fast 2, full 200)."
    )
    parser.add_argument(
        "--patience", type=int_option(), help="Early-stopping patience (fast 2, full 10)."
    )
    parser.add_argument(
        "--alphas",
        type=float_option(0.0, 1.0),
        nargs="+",
        help="BSARec filter weights tried (default: no grid).",
    )
    parser.add_argument("--cutoffs", type=int_option(), nargs="+", help="BSARec c values tried.")
    parser.add_argument(
        "--alpha", type=float_option(0.0, 1.0), default=0.9, help="BSARec filter weight."
    )
    parser.add_argument(
        "--cutoff", type=int_option(), default=3, help="BSARec's c (keeps c//2+1 bins)."
    )
    parser.add_argument(
        "--grid-users",
        type=int_option(),
        help="Users of the alpha/c search (default: all of the run's).",
    )
    parser.add_argument(
        "--grid-epochs", type=int_option(), help="Most epochs per alpha/c candidate."
    )
    parser.add_argument(
        "--learning-rate",
        type=float_option(0.0, low_open=True),
        default=1e-3,
        help="Adam learning rate.",
    )
    parser.add_argument("--batch-size", type=int_option(), default=256, help="Training batch size.")
    parser.add_argument(
        "--max-length", type=int_option(), help="History length (fast 20, full 50 as in the paper)."
    )
    parser.add_argument(
        "--jit-compile",
        choices=("auto", "on", "off"),
        default="auto",
        help="Train with XLA: auto (BSARec on, SASRec off: the faster on CPU), on or off.",
    )


def train_and_test(model, split, epochs, patience, learning_rate, batch_size, jit_compile=False):
    """Trains with cross-entropy and early stopping; returns test metrics and the log."""
    model.compile(
        optimizer=keras.optimizers.Adam(learning_rate),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    stopping = RankingEarlyStopping(
        split.valid_inputs, split.valid_targets, split.valid_seen, patience=patience
    )
    start = time.perf_counter()
    build_optimizer(model)
    history = model.fit(
        split.train_inputs,
        split.train_targets,
        batch_size=batch_size,
        epochs=epochs,
        callbacks=[stopping],
        verbose=0,
    )
    seconds = time.perf_counter() - start
    if stopping.best_epoch is None:
        raise ValueError(
            "Training diverged: every validation epoch gave non-finite scores. Try a lower "
            f"learning rate. Received: learning_rate={learning_rate!r}"
        )
    epochs_run = len(stopping.history)
    test = evaluate_full_ranking(model, split.test_inputs, split.test_targets, split.test_seen)
    return {
        "test": test,
        "best_epoch": stopping.best_epoch + 1,
        "epochs_run": epochs_run,
        "valid_ndcg20": [m["NDCG@20"] for m in stopping.history],
        "train_loss": [float(v) for v in history.history["loss"]],
        "seconds": seconds,
        # Training and validation together, per training sequence.
        "sequences_per_s": epochs_run * len(split.train_targets) / seconds,
    }


def summarize(runs):
    """Mean and sample standard deviation of each test metric over seeds."""
    return {metric: mean_and_std([run["test"][metric] for run in runs]) for metric in METRICS}


def run(args):
    started_at = time.time()
    load_at_start = [round(value, 2) for value in os.getloadavg()]
    size, setting = choose_setting(args, SETTINGS)
    seeds = args.seeds or setting["seeds"]
    epochs = args.epochs or setting["epochs"]
    patience = args.patience or setting["patience"]
    max_length = args.max_length or setting["max_length"]
    split, num_items = movielens_100k_split(max_length, setting["users"])
    train = {"epochs": epochs, "patience": patience, "lr": args.learning_rate}
    train["batch_size"] = args.batch_size
    grid = choose_alpha_and_cutoff(args, max_length, setting["users"], train)
    alpha, cutoff = grid["chosen"] if grid else (args.alpha, args.cutoff)
    builders = {
        "SASRec": lambda seed: build_sasrec(num_items, max_length, seed=seed),
        "BSARec": lambda seed: build_bsarec(
            num_items, max_length, alpha=alpha, cutoff=cutoff, seed=seed
        ),
    }
    runs = {name: [] for name in MODELS}
    for seed in range(seeds):
        for name in MODELS:
            keras.utils.set_random_seed(seed)
            result = fit_run(builders[name](seed), split, train, jit_for(args, name))
            runs[name].append(result)
            print(
                f"{name} seed {seed}: best epoch {result['best_epoch']}/{result['epochs_run']}, "
                f"{result['seconds']:.0f} s, {result['sequences_per_s']:.0f} sequences/s, "
                + ", ".join(f"{m} {result['test'][m]:.4f}" for m in METRICS)
            )
    summary = {name: summarize(runs[name]) for name in MODELS}
    print_table(summary, seeds)
    results = {
        "setting": size,
        "users": len(split.test_targets),
        "items": num_items,
        "train_samples": len(split.train_targets),
        "seeds": seeds,
        "max_epochs": epochs,
        "patience": patience,
        "alpha": alpha,
        "cutoff": cutoff,
        "grid": grid,
        "learning_rate": args.learning_rate,
        "batch_size": args.batch_size,
        "max_length": max_length,
        "jit_compile": {name: jit_for(args, name) for name in MODELS},
        "load_average_at_start": load_at_start,
        "summary": summary,
        "bsarec_beats_sasrec": {
            metric: summary["BSARec"][metric]["mean"] > summary["SASRec"][metric]["mean"]
            for metric in METRICS
        },
        "runs": runs,
    }
    return finish(args, NAME, results, plot(runs, summary), started_at=started_at, setting=size)


def jit_for(args, name):
    """Whether model `name` trains under XLA, from `--jit-compile`."""
    return AUTO_JIT[name] if args.jit_compile == "auto" else args.jit_compile == "on"


def fit_run(model, split, train, jit_compile):
    return train_and_test(
        model,
        split,
        train["epochs"],
        train["patience"],
        train["lr"],
        train["batch_size"],
        jit_compile,
    )


def choose_alpha_and_cutoff(args, max_length, users, train):
    """BSARec's alpha and c with the best validation NDCG@20 (seed 0); `None` without a grid."""
    if not args.alphas and not args.cutoffs:
        return None
    alphas, cutoffs = args.alphas or [args.alpha], args.cutoffs or [args.cutoff]
    grid_users = args.grid_users or users
    split, num_items = movielens_100k_split(max_length, grid_users)
    train = {**train, "epochs": args.grid_epochs or train["epochs"]}
    candidates = []
    for alpha in alphas:
        for cutoff in cutoffs:
            keras.utils.set_random_seed(0)
            model = build_bsarec(num_items, max_length, alpha=alpha, cutoff=cutoff, seed=0)
            result = fit_run(model, split, train, jit_for(args, "BSARec"))
            best = max(result["valid_ndcg20"])
            candidates.append({"alpha": alpha, "cutoff": cutoff, "valid_ndcg20": best})
            print(f"grid alpha={alpha} c={cutoff}: validation NDCG@20 {best:.4f}", flush=True)
    best = max(candidates, key=lambda c: c["valid_ndcg20"])
    return {
        "users": len(split.test_targets),
        "max_epochs": train["epochs"],
        "candidates": candidates,
        "chosen": [best["alpha"], best["cutoff"]],
    }


def print_table(summary, seeds):
    print(f"\nTest, full ranking, mean ± std over {seeds} seeds")
    print(f"{'model':<8}" + "".join(f"{m:>18}" for m in METRICS))
    for name, table in summary.items():
        cells = "".join(f"{table[m]['mean']:>10.4f} ± {table[m]['std']:.4f}" for m in METRICS)
        print(f"{name:<8}{cells}")


def plot(runs, summary):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, bars) = plt.subplots(1, 2, figsize=(10, 3.5))
    positions = np.arange(len(METRICS))
    for offset, name in zip((-0.2, 0.2), MODELS, strict=True):
        color = COLORS[name]
        for index, result in enumerate(runs[name]):
            epochs = np.arange(1, len(result["valid_ndcg20"]) + 1)
            label = name if index == 0 else None
            curves.plot(epochs, result["valid_ndcg20"], color=color, alpha=0.7, label=label)
        means = [summary[name][m]["mean"] for m in METRICS]
        stds = [summary[name][m]["std"] for m in METRICS]
        bars.bar(positions + offset, means, 0.4, yerr=stds, color=color, label=name)
    curves.set(xlabel="epoch", ylabel="validation NDCG@20", title="Early stopping signal")
    curves.legend()
    bars.set_xticks(positions, METRICS, rotation=30)
    bars.set(title="Test (MovieLens-100K, full ranking)")
    bars.legend()
    figure.tight_layout()
    return figure
