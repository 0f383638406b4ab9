"""AdaViT on Fashion-MNIST (Meng et al., CVPR 2022).

Pretrains a small ViT, fine-tunes AdaViT gates at usage targets γ, and
reports accuracy against measured MACs and measured fast-path latency,
next to the full model and a random policy at the same usage.
"""

import time

import numpy as np

from keras_attn.datasets import load_fashion_mnist
from keras_attn.models import finetune_adavit, pretrain_vit
from keras_attn.models.adavit_fast_path import xla_function
from keras_attn.reproduce._run import choose_setting, finish
from keras_attn.utils import batch_latency_ms

NAME = "adavit"
HELP = "AdaViT on Fashion-MNIST: accuracy vs MACs and fast-path latency at several γ."

MODEL = {"patch_size": 4, "hidden_dim": 32, "num_layers": 5, "num_heads": 4, "intermediate_dim": 64}
SETTINGS = {
    "small": {
        "train": 512,
        "test": 256,
        "pretrain_epochs": 1,
        "finetune_epochs": 1,
        "latency_rounds": 3,
        "latency_batches": 2,
    },
    "fast": {
        "train": 3000,
        "test": 1000,
        "pretrain_epochs": 4,
        "finetune_epochs": 3,
        "latency_rounds": 40,
        "latency_batches": 4,
    },
    "full": {
        "train": 15000,
        "test": 5000,
        "pretrain_epochs": 6,
        "finetune_epochs": 3,
        "latency_rounds": 200,
        "latency_batches": 10,
    },
}
LARGE_BATCH = 64
EVAL_BATCH = 500


def add_arguments(parser):
    parser.add_argument(
        "--gammas",
        type=float,
        nargs="+",
        default=[0.3, 0.5, 0.7],
        help="usage targets γ, one fine-tuned model each (default: 0.3 0.5 0.7)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the weights, gates and data order"
    )


def load_data(train, test):
    """Fashion-MNIST scaled to `[0, 1]`: `((x_train, y_train), (x_test, y_test))`."""
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist(limit=max(train, test))
    return (
        (x_train[:train].astype("float32") / 255.0, y_train[:train].astype("int32")),
        (x_test[:test].astype("float32") / 255.0, y_test[:test].astype("int32")),
    )


def random_decisions(usage, like, rng):
    """Independent random decisions shaped like `like`, keep rate `usage[kind]`."""
    return {key: rng.random(value.shape) < usage[key] for key, value in like.items()}


def usage_of(decisions):
    """Mean keep rate of each kind of decision."""
    return {key: float(np.mean(value)) for key, value in decisions.items()}


def run(args):
    started_at = time.time()
    size, setting = choose_setting(args, SETTINGS)
    (x_train, y_train), (x_test, y_test) = load_data(setting["train"], setting["test"])
    vit = pretrain_vit(x_train, y_train, 10, setting["pretrain_epochs"], seed=args.seed, **MODEL)
    models = {
        gamma: finetune_adavit(
            vit, x_train, y_train, gamma, setting["finetune_epochs"], seed=args.seed
        )
        for gamma in args.gammas
    }
    fast_paths = {gamma: model.fast_path() for gamma, model in models.items()}
    reference = next(iter(fast_paths.values()))
    full_accuracy = _accuracy(vit.predict(x_test, batch_size=500, verbose=0), y_test)
    results = {
        "setting": setting,
        "model": MODEL,
        "full_model": {"accuracy": full_accuracy, "macs": reference.full_macs()},
        "adavit": [],
    }
    rng = np.random.default_rng(args.seed)
    batch_size = min(EVAL_BATCH, len(x_test))  # one compiled fast path per policy
    examples = {}
    for gamma, fast in fast_paths.items():
        learned = fast.run(x_test, batch_size=batch_size)
        usage = usage_of(learned.decisions)
        random_policy = random_decisions(usage, learned.decisions, rng)
        random = fast.run(x_test, random_policy, batch_size=batch_size)
        results["adavit"].append(
            {
                "gamma": gamma,
                "accuracy": _accuracy(learned.outputs, y_test),
                "macs": float(learned.macs.mean()),
                "usage": usage,
                "random_policy": {
                    "accuracy": _accuracy(random.outputs, y_test),
                    "macs": float(random.macs.mean()),
                },
            }
        )
        examples[gamma] = learned.decisions["patches"][:6]
    results["latency_ms"] = _latency(vit, fast_paths, x_test, setting)
    figure = _figure(results, x_test[:6], examples)
    _print_summary(results)
    return finish(args, NAME, results, figure, started_at=started_at, setting=size)


def _latency(vit, fast_paths, images, setting):
    predictors = {"full (XLA)": xla_function(vit)}
    for gamma, fast in fast_paths.items():
        predictors[f"AdaViT γ={gamma} fast path"] = lambda batch, fast=fast: fast.run(batch).outputs
    return {
        f"batch {batch}": batch_latency_ms(predictors, images, batch, rounds)
        for batch, rounds in (
            (1, setting["latency_rounds"]),
            (LARGE_BATCH, setting["latency_batches"]),
        )
        if batch <= len(images)
    }


def _accuracy(probabilities, labels):
    return float(np.mean(np.argmax(probabilities, -1) == labels))


def _figure(results, images, examples):
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(12, 7))
    grid = figure.add_gridspec(2 + len(examples), 6, height_ratios=[3, 0.2] + [1] * len(examples))
    compute_axis = figure.add_subplot(grid[0, :3])
    latency_axis = figure.add_subplot(grid[0, 3:])
    _plot_compute(compute_axis, results)
    _plot_latency(latency_axis, results)
    for row, (gamma, kept) in enumerate(examples.items()):
        for column, image in enumerate(images):
            axis = figure.add_subplot(grid[2 + row, column])
            _plot_policy(axis, image, kept[column])
            if column == 0:
                axis.set_ylabel(f"γ={gamma}", fontsize=8)
    figure.suptitle("AdaViT on Fashion-MNIST; bottom: share of gated blocks keeping each patch")
    return figure


def _plot_compute(axis, results):
    runs = results["adavit"]
    axis.plot([r["macs"] / 1e6 for r in runs], [r["accuracy"] for r in runs], "o-", label="AdaViT")
    axis.plot(
        [r["random_policy"]["macs"] / 1e6 for r in runs],
        [r["random_policy"]["accuracy"] for r in runs],
        "s--",
        label="random policy, same usage",
    )
    full = results["full_model"]
    axis.plot(full["macs"] / 1e6, full["accuracy"], "k*", markersize=12, label="full ViT")
    for r in runs:
        axis.annotate(f"γ={r['gamma']}", (r["macs"] / 1e6, r["accuracy"]), fontsize=8)
    axis.set_xlabel("MMACs per image")
    axis.set_ylabel("test accuracy")
    axis.legend(fontsize=8)


def _plot_latency(axis, results):
    latency = results["latency_ms"]["batch 1"]
    runs = results["adavit"]
    axis.plot(
        [latency[f"AdaViT γ={r['gamma']} fast path"] for r in runs],
        [r["accuracy"] for r in runs],
        "o-",
        label="AdaViT fast path",
    )
    accuracy = results["full_model"]["accuracy"]
    axis.plot(latency["full (XLA)"], accuracy, "k*", markersize=10, label="full (XLA)")
    axis.set_xlabel("latency at batch 1 (ms)")
    axis.set_ylabel("test accuracy")
    axis.legend(fontsize=8)


def _plot_policy(axis, image, kept):
    side = int(np.sqrt(kept.shape[-1]))
    share = kept.mean(0).reshape(side, side)  # (rows, columns) of patches
    axis.imshow(image, cmap="gray")
    axis.imshow(share, cmap="viridis", alpha=0.5, vmin=0, vmax=1, extent=(-0.5, 27.5, 27.5, -0.5))
    axis.set_xticks([])
    axis.set_yticks([])


def _print_summary(results):
    full = results["full_model"]
    print(f"full ViT: accuracy {full['accuracy']:.4f}, {full['macs'] / 1e6:.2f} MMACs")
    for r in results["adavit"]:
        print(
            f"γ={r['gamma']}: accuracy {r['accuracy']:.4f}, {r['macs'] / 1e6:.2f} MMACs; "
            f"random policy {r['random_policy']['accuracy']:.4f}; usage "
            + ", ".join(f"{key} {value:.2f}" for key, value in r["usage"].items())
        )
    for batch, times in results["latency_ms"].items():
        print(f"{batch}: " + ", ".join(f"{name} {ms:.2f} ms" for name, ms in times.items()))
