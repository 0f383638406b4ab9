"""T2T-ViT on Fashion-MNIST: the T2T module against patches, deep-narrow against shallow-wide.

Yuan et al., "Tokens-to-Token ViT: Training Vision Transformers from Scratch
on ImageNet", ICCV 2021 (https://arxiv.org/abs/2101.11986), report that the
T2T module beats a plain patch embedding (81.5% against 79.5% top-1 for
T2T-ViT-14 on ImageNet) and that a deep-narrow backbone beats a shallow-wide
one. This reproduction scales both comparisons down to 28x28 Fashion-MNIST
images (real data, Debian `dataset-fashion-mnist`):

1. a small T2T-ViT (soft splits 3/3/3, strides 2/2/1, padding 1: 49 tokens)
   against a plain ViT with 4x4 patches (also 49 tokens) and the same
   backbone sizes;
2. a deep-narrow T2T-ViT (width 64, 8 blocks) against a shallow-wide one
   (width 128, 2 blocks): their blocks hold 266,240 and 264,192 weights;
   with the wider projection and head the shallow-wide model has 4% more
   parameters in total (300,524 against 289,260).

Each model trains with several seeds; the table gives test accuracy,
parameters and MACs.
"""

import time

import keras
import numpy as np

from keras_attn.datasets import load_fashion_mnist
from keras_attn.models import build_t2t_vit, build_vision_transformer
from keras_attn.utils import count_macs, finish_run, is_small_run

NAME = "t2t"
HELP = "T2T-ViT vs plain ViT and deep-narrow vs shallow-wide on Fashion-MNIST."

# 28x28 soft splits: 28 -> 14 -> 7 -> 7, so 49 tokens like 4x4 patches.
SMALL_T2T = {
    "token_dim": 16,
    "kernel_sizes": (3, 3, 3),
    "strides": (2, 2, 1),
    "paddings": (1, 1, 1),
}
MODELS = {
    "t2t_vit": {"embed_dim": 64, "depth": 4, "num_heads": 4},
    "vit": {"embed_dim": 64, "depth": 4, "num_heads": 4, "patch_size": 4},
    "deep_narrow": {"embed_dim": 64, "depth": 8, "num_heads": 4},
    "shallow_wide": {"embed_dim": 128, "depth": 2, "num_heads": 4},
}
COMPARISONS = {
    "T2T module vs patches": ("t2t_vit", "vit"),
    "deep-narrow vs shallow-wide": ("deep_narrow", "shallow_wide"),
}
# (train images, test images, epochs) of each setting.
SETTINGS = {"small": (256, 256, 1), "fast": (2000, 2000, 3), "full": (8000, 10000, 5)}


def add_arguments(parser):
    parser.add_argument(
        "--seeds", type=int, default=None, help="Number of seeds N: runs seeds 0..N-1 (default 2)."
    )
    parser.add_argument("--epochs", type=int, default=None, help="Override the epochs.")
    parser.add_argument("--train-size", type=int, default=None, help="Override the train size.")
    parser.add_argument("--batch-size", type=int, default=128, help="Training batch size.")
    parser.add_argument("--learning-rate", type=float, default=2e-3, help="Learning rate.")


def build_model(name, seed=0):
    """One of `MODELS` for 28x28x1 images and 10 classes."""
    sizes = dict(MODELS[name])
    if name == "vit":
        return build_vision_transformer(
            (28, 28, 1),
            10,
            patch_size=sizes["patch_size"],
            dim=sizes["embed_dim"],
            depth=sizes["depth"],
            num_heads=sizes["num_heads"],
            mlp_ratio=2.0,
            position_embedding="sincos",
            name=name,
        )
    return build_t2t_vit(
        (28, 28, 1), 10, variant=None, mlp_ratio=2.0, seed=seed, name=name, **SMALL_T2T, **sizes
    )


def load_data(train_size, test_size):
    """Standardised `(images, labels)` pairs, images `(n, 28, 28, 1)` float32."""
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist(limit=max(train_size, test_size))
    mean, std = x_train.mean(), x_train.std()

    def prepare(x):
        return ((x.astype("float32") - mean) / std)[..., None]

    return (prepare(x_train[:train_size]), y_train[:train_size]), (
        prepare(x_test[:test_size]),
        y_test[:test_size],
    )


def train_and_evaluate(name, seed, data, epochs, batch_size, learning_rate):
    """Trains one model from scratch; returns its row of the results table."""
    (x_train, y_train), (x_test, y_test) = data
    keras.utils.set_random_seed(seed)
    model = build_model(name, seed)
    steps = epochs * int(np.ceil(len(x_train) / batch_size))
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0, steps, warmup_target=learning_rate, warmup_steps=max(1, steps // 10)
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=0.05),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        # Graph mode: on a CPU, XLA compilation of the training step costs
        # more than it saves in runs this short.
        jit_compile=False,
    )
    start = time.perf_counter()
    history = model.fit(x_train, y_train, epochs=epochs, batch_size=batch_size, verbose=0)
    seconds = time.perf_counter() - start
    _, accuracy = model.evaluate(x_test, y_test, batch_size=500, verbose=0)
    return {
        "model": name,
        "seed": seed,
        "test_accuracy": float(accuracy),
        "parameters": int(model.count_params()),
        "macs": int(count_macs(model)),
        "train_seconds": seconds,
        "train_loss": [float(v) for v in history.history["loss"]],
    }


def summarise(rows):
    """Mean and standard deviation of the test accuracy of each model."""
    summary = {}
    for name in MODELS:
        accuracies = [row["test_accuracy"] for row in rows if row["model"] == name]
        if accuracies:
            first = next(row for row in rows if row["model"] == name)
            summary[name] = {
                "mean_accuracy": float(np.mean(accuracies)),
                "std_accuracy": float(np.std(accuracies)),
                "seeds": len(accuracies),
                "parameters": first["parameters"],
                "macs": first["macs"],
            }
    return summary


def run(args):
    started_at = time.time()
    setting = "small" if is_small_run() else ("full" if args.full else "fast")
    train_size, test_size, epochs = SETTINGS[setting]
    train_size = args.train_size or train_size
    epochs = args.epochs or epochs
    seeds = list(range(args.seeds or (1 if setting == "small" else 2)))
    data = load_data(train_size, test_size)
    print(f"Fashion-MNIST, {train_size} training and {test_size} test images, {epochs} epochs.")
    rows = []
    for seed in seeds:
        for name in MODELS:
            row = train_and_evaluate(name, seed, data, epochs, args.batch_size, args.learning_rate)
            rows.append(row)
            print(
                f"{name:>13} seed {seed}: test accuracy {row['test_accuracy']:.4f}, "
                f"{row['parameters']:,} parameters, {row['macs'] / 1e6:.1f}M MACs, "
                f"{row['train_seconds']:.0f}s"
            )
    summary = summarise(rows)
    print(_table(summary))
    results = {
        "setting": setting,
        "train_size": train_size,
        "test_size": test_size,
        "epochs": epochs,
        "seeds": seeds,
        "models": MODELS,
        "runs": rows,
        "summary": summary,
        "differences": {
            title: summary[a]["mean_accuracy"] - summary[b]["mean_accuracy"]
            for title, (a, b) in COMPARISONS.items()
        },
    }
    figure = _figure(rows, summary)
    finish_run(args.out, NAME, results, figure, started_at=started_at, setting=setting)
    return results


def _table(summary):
    lines = ["| model | parameters | MACs | test accuracy (mean ± std) |", "|---|---|---|---|"]
    for name, entry in summary.items():
        lines.append(
            f"| {name} | {entry['parameters']:,} | {entry['macs'] / 1e6:.1f}M | "
            f"{entry['mean_accuracy']:.4f} ± {entry['std_accuracy']:.4f} |"
        )
    return "\n".join(lines)


def _figure(rows, summary):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(COMPARISONS), figsize=(8, 3.2), sharey=True)
    for axis, (title, names) in zip(axes, COMPARISONS.items(), strict=True):
        for position, name in enumerate(names):
            accuracies = [row["test_accuracy"] for row in rows if row["model"] == name]
            axis.bar(position, summary[name]["mean_accuracy"], color=f"C{position}", alpha=0.6)
            axis.scatter([position] * len(accuracies), accuracies, color="black", s=12, zorder=3)
        axis.set_xticks(range(len(names)), names)
        axis.set_title(title)
    low = min(row["test_accuracy"] for row in rows)
    axes[0].set_ylim(max(0.0, low - 0.05), min(1.0, max(r["test_accuracy"] for r in rows) + 0.02))
    axes[0].set_ylabel("test accuracy (bars: mean, dots: seeds)")
    figure.tight_layout()
    return figure
