"""T2T-ViT on Fashion-MNIST: the T2T module against patches, deep-narrow against shallow-wide.

Yuan et al., "Tokens-to-Token ViT: Training Vision Transformers from Scratch
on ImageNet", ICCV 2021 (https://arxiv.org/abs/2101.11986), report that the
T2T module beats a plain patch embedding (81.5% against 79.5% top-1 for
T2T-ViT-14 on ImageNet) and that a deep-narrow backbone beats a shallow-wide
one of similar size. This reproduction scales both comparisons down to 28x28
Fashion-MNIST images (real data, Debian `dataset-fashion-mnist`) with light
augmentation (shifts of up to 2 pixels, left-right flips):

1. Tokenizer, one backbone: `build_t2t_vit(tokenizer="t2t")` (soft splits
   3/3/3, strides 2/2/1, padding 1, token size 16, Performer token layers:
   28 -> 14 -> 7 -> 7, so 49 tokens) against `build_t2t_vit(tokenizer=
   "patches", patch_size=4)` (49 tokens). Both have the same backbone (width
   64, 4 blocks of 4 heads, MLPs twice as wide, no query/key/value bias,
   frozen 1D sinusoidal positions), and for each seed the same initial
   backbone weights: only the tokenizer differs.
2. Depth against width at equal size: a deep-narrow T2T-ViT (width 48, 15
   blocks of 3 heads) against a shallow-wide one (width 128, 2 blocks of 8
   heads), both with heads of size 16, MLPs twice as wide and the T2T
   module above: 301,932 against 300,524 parameters (0.5% apart).

Every model trains for the same number of optimizer steps with paired seeds:
seed s fixes the batches and their augmentation, identical for all four
models. The result gives each run's test-accuracy curve (on the first test
images), its final accuracy on the whole test subset, mean ± std per model,
and the paired difference per seed of each comparison (T2T − patches,
deep-narrow − shallow-wide) with its mean ± std.

Settings: the fast one (the default) trains on 4,000 images for 60 steps
with seeds 0 and 1, a smoke test of about 5 minutes; `--full` trains on all
60,000 images for 800 steps per run with seeds 0 and 1 and takes the final
accuracy on all 10,000 test images, 30 minutes on 2 CPU cores (the
committed run, `results/t2t-full.json`).
"""

import time

import keras
import numpy as np

from keras_attn.datasets import load_fashion_mnist
from keras_attn.models import build_t2t_vit, count_macs
from keras_attn.reproduce._images import fit_augmented, paired_difference, standardized_subsets
from keras_attn.reproduce._run import add_seeds_argument, choose_setting, finish, mean_and_std
from keras_attn.utils.training import RECIPE, compile_classifier, curve_steps, reset_optimizer
from keras_attn.utils.validation import check_choice, int_option

NAME = "t2t"
HELP = "T2T-ViT on Fashion-MNIST: T2T module vs patches, deep-narrow vs shallow-wide."

# 28x28 soft splits: 28 -> 14 -> 7 -> 7, so 49 tokens like 4x4 patches.
SOFT_SPLITS = {
    "token_dim": 16,
    "kernel_sizes": (3, 3, 3),
    "strides": (2, 2, 1),
    "paddings": (1, 1, 1),
}
# Every backbone's MLP is twice its width.
MODELS = {
    "t2t": {
        "tokenizer": "t2t",
        "hidden_dim": 64,
        "num_layers": 4,
        "num_heads": 4,
        "intermediate_dim": 128,
    },
    "patches": {
        "tokenizer": "patches",
        "patch_size": 4,
        "hidden_dim": 64,
        "num_layers": 4,
        "num_heads": 4,
        "intermediate_dim": 128,
    },
    # Equal parameter counts (within 1%), heads of size 16 in both.
    "deep_narrow": {
        "tokenizer": "t2t",
        "hidden_dim": 48,
        "num_layers": 15,
        "num_heads": 3,
        "intermediate_dim": 96,
    },
    "shallow_wide": {
        "tokenizer": "t2t",
        "hidden_dim": 128,
        "num_layers": 2,
        "num_heads": 8,
        "intermediate_dim": 256,
    },
}
# Each comparison: (model, baseline); its paired difference is model − baseline.
COMPARISONS = {
    "tokenizer": ("t2t", "patches"),
    "shape": ("deep_narrow", "shallow_wide"),
}
TOKENIZER_LAYERS = ("tokens_to_token", "patch_embedding")
MODES = ("eager", "graph", "xla")
# Each setting trains every model for `steps` optimizer steps (batches of
# `batch_size`) on the first `train_size` training images, per seed
# 0..seeds-1; test accuracy is measured `evaluations` times on the first
# `curve_test_size` test images (the curve) and once at the end on
# `test_size` images (the final accuracy). `mode` is how Keras runs the steps.
#
# XLA: measured on 2 (shared) CPU cores, a training step costs fewer
# CPU-seconds with XLA than in graph mode (T2T 0.21-0.23 against 0.30-0.39,
# patches 0.16 against 0.21, deep-narrow 0.47 against 0.73), as XLA fuses
# the many small operations of the norms, the softmax and the Performer.
# Graph mode spreads a step over both cores and only draws level when it has
# them to itself, while compiling the four models costs about a minute more
# than tracing them, so XLA is kept for runs of hundreds of steps. The small
# setting runs eagerly: for a handful of steps, tracing costs more than it saves.
SETTINGS = {
    # KERAS_ATTN_SMALL (tests, notebooks): seconds.
    "small": {
        "train_size": 256,
        "steps": 2,
        "evaluations": 2,
        "batch_size": 32,
        "curve_test_size": 64,
        "test_size": 128,
        "seeds": 2,
        "mode": "eager",
    },
    # The default CLI setting: a quick look, about 5 minutes on 2 idle cores
    # (half of it compiling the four models).
    "fast": {
        "train_size": 4000,
        "steps": 60,
        "evaluations": 3,
        "batch_size": 128,
        "curve_test_size": 500,
        "test_size": 1000,
        "seeds": 2,
        "mode": "xla",
    },
    # `--full`: 30 minutes on 2 cores (results/t2t-full.json; about 36 were
    # estimated beforehand from CPU-seconds per step: patches 0.16, T2T 0.22,
    # shallow-wide 0.28, deep-narrow 0.47).
    "full": {
        "train_size": 60000,
        "steps": 800,
        "evaluations": 10,
        "batch_size": 128,
        "curve_test_size": 2000,
        "test_size": 10000,
        "seeds": 2,
        "mode": "xla",
    },
}


def add_arguments(parser):
    add_seeds_argument(parser)
    parser.add_argument(
        "--steps",
        type=int_option(),
        help="Optimizer steps per run, a multiple of the setting's evaluations "
        "(overrides the setting).",
    )
    parser.add_argument(
        "--train-size",
        type=int_option(1, 60000),
        help="Training images (overrides the setting; at most 60000).",
    )


def setting(args):
    """The size setting for `args`: small, fast or full, with overrides.

    Returns:
        dict, the entry of `SETTINGS` with `--seeds`, `--steps` and
        `--train-size` applied and its `name` added.
    """
    name, sizes = choose_setting(args, SETTINGS)
    chosen = dict(sizes, name=name)
    for key in ("seeds", "steps", "train_size"):
        if getattr(args, key, None) is not None:
            chosen[key] = getattr(args, key)
    if chosen["steps"] % chosen["evaluations"]:
        raise ValueError(
            f"argument --steps: must be a multiple of {chosen['evaluations']}, the number "
            f"of evaluations of the {name!r} setting. Received: steps={chosen['steps']}"
        )
    return chosen


def check_arguments(args):
    """Refuses, before anything trains, options that only the setting can check.

    Raises:
        ValueError: when `--steps` is not a multiple of the setting's
            number of evaluations.
    """
    setting(args)


def run(args):
    started_at = time.time()
    chosen = setting(args)
    data = load_data(chosen["train_size"], chosen["test_size"])
    seeds = list(range(chosen["seeds"]))
    print(
        f"Setting {chosen['name']!r}: {len(data[0])} training images, {chosen['steps']} steps "
        f"per run, {len(data[2])} test images, paired seeds {seeds}."
    )
    models, runs = {}, {}
    for name in MODELS:
        model = compile_model(name, chosen["steps"], chosen["mode"])
        models[name] = describe(model, name)
        runs[name] = []
        for seed in seeds:
            entry = train(model, name, seed, data, chosen)
            runs[name].append(entry)
            print(
                f"{name:>12} seed {seed}: test accuracy {entry['final_test_accuracy']:.4f} "
                f"({entry['seconds']:.0f} s)"
            )
    summary = summarize(runs)
    results = {
        "setting": chosen,
        "models": models,
        "comparisons": COMPARISONS,
        **RECIPE,
        "curve_steps": curve_steps(chosen["steps"], chosen["evaluations"]),
        "runs": runs,
        "summary": summary,
    }
    print(table(results))
    return finish(
        args, NAME, results, plot_curves(results), started_at=started_at, setting=chosen["name"]
    )


def load_data(train_size, test_size):
    """Train and test subsets, scaled to zero mean and unit variance.

    Returns:
        `(x_train, y_train, x_test, y_test)`, images float32 `(n, 28, 28)`.
    """
    splits = load_fashion_mnist(limit=max(train_size, test_size))
    return standardized_subsets(splits, train_size, test_size)


def build_model(name, seed=None):
    """The T2T-ViT `MODELS[name]` for 28x28 images and 10 classes.

    Args:
        name: a key of `MODELS`.
        seed: int, seed of the Performer random features of the T2T module.

    Returns:
        An uncompiled `keras.Model` named `name`.
    """
    sizes = dict(MODELS[name])
    soft_splits = SOFT_SPLITS if sizes["tokenizer"] == "t2t" else {}
    return build_t2t_vit(
        (28, 28),
        10,
        variant=None,
        seed=seed,
        name=name,
        **soft_splits,
        **sizes,
    )


def backbone_layers(model):
    """The layers of `model` that hold weights, the tokenizer excepted."""
    return [layer for layer in model.layers if layer.weights and layer.name not in TOKENIZER_LAYERS]


def compile_model(name, steps, mode):
    """One compiled model, reused by every seed (compiling once saves time).

    AdamW with a linear warm-up over the first 10% of the steps and a cosine
    decay. The learning rate is a schedule, so the optimizer's state is only
    its iteration count and moments, which `reset` sets back to zero.

    Args:
        name: a key of `MODELS`.
        steps: int, optimizer steps of the schedule.
        mode: one of `MODES`: `"eager"`, `"graph"` or `"xla"` (graph mode
            compiled by XLA).
    """
    check_choice("mode", mode, MODES)
    return compile_classifier(
        build_model(name), steps, jit_compile=mode == "xla", run_eagerly=mode == "eager"
    )


def reset(model, name, seed):
    """Fresh weights drawn under `seed` and a fresh optimizer state.

    Both tokenizer models take the backbone weights (every layer after the
    tokenizer) that the patch model draws under `seed`, so for one seed they
    start from the same backbone and differ only in the tokenizer.
    """
    keras.utils.set_random_seed(seed)
    fresh = build_model(name, seed)
    tokenizers = COMPARISONS["tokenizer"]
    if name in tokenizers and name != tokenizers[1]:
        keras.utils.set_random_seed(seed)
        for layer in backbone_layers(build_model(tokenizers[1], seed)):
            fresh.get_layer(layer.name).set_weights(layer.get_weights())
    model.set_weights(fresh.get_weights())
    reset_optimizer(model)
    keras.utils.set_random_seed(seed)  # the dropout of the Performer token layers


def train(model, name, seed, data, chosen):
    """Trains `model` (from `compile_model`) from fresh weights under `seed`.

    The batches and their augmentation come from `seed` alone, the same for
    every model. Test accuracy is measured after every `steps / evaluations`
    steps on the first `curve_test_size` test images, and at the end on all.

    Args:
        model: the compiled model `name`.
        name: a key of `MODELS`.
        seed: int, seed of the weights, the batches and the augmentation.
        data: `(x_train, y_train, x_test, y_test)` from `load_data`.
        chosen: the setting, from `setting`.

    Returns:
        dict with the `seed`, the `final_test_accuracy`, the curves
        `test_accuracy` and `train_accuracy` (one value per evaluation,
        at `curve_steps(steps, evaluations)`) and the `seconds` it took.
    """
    reset(model, name, seed)
    run = fit_augmented(
        model,
        data,
        chosen["batch_size"],
        chosen["steps"],
        chosen["evaluations"],
        chosen["curve_test_size"],
        seed,
    )
    return {"seed": seed, **run}


def describe(model, name):
    """`MODELS[name]` with the model's parameter counts and MACs per image."""
    trainable = sum(int(np.prod(weight.shape)) for weight in model.trainable_weights)
    return {
        **MODELS[name],
        "parameters": int(model.count_params()),
        "trainable_parameters": trainable,
        "macs": int(count_macs(model)),
    }


def summarize(runs):
    """Final test accuracy per model (mean ± std over seeds) and each paired difference.

    Returns:
        dict with one `{"mean", "std"}` entry per model of `runs` and, under
        `"differences"`, one entry per comparison of `COMPARISONS` whose two
        models ran: model − baseline per seed (`per_seed`), their mean and
        their standard deviation (`ddof=1`; 0 for one seed).
    """
    finals = {name: [run["final_test_accuracy"] for run in runs[name]] for name in runs}
    summary = {name: mean_and_std(values) for name, values in finals.items()}
    summary["differences"] = {}
    for comparison, (model, baseline) in COMPARISONS.items():
        if model in finals and baseline in finals:
            summary["differences"][comparison] = paired_difference(finals[model], finals[baseline])
    return summary


def table(results):
    """A markdown table of the final accuracies and the paired differences."""
    lines = [
        "| model | parameters | MACs | final test accuracy (mean ± std) |",
        "|---|---|---|---|",
    ]
    for name, entry in results["models"].items():
        summary = results["summary"][name]
        lines.append(
            f"| {name} | {entry['parameters']:,} | {entry['macs'] / 1e6:.1f}M | "
            f"{summary['mean']:.4f} ± {summary['std']:.4f} |"
        )
    lines.append("")
    for comparison, (model, baseline) in COMPARISONS.items():
        difference = results["summary"]["differences"][comparison]
        lines.append(
            f"{model} − {baseline} (paired): {difference['mean']:+.4f} ± {difference['std']:.4f}"
        )
    return "\n".join(lines)


def plot_curves(results):
    """One panel per comparison: test accuracy against steps, mean ± 1 std over seeds."""
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, len(COMPARISONS), figsize=(8.4, 3.4), sharey=True)
    steps = results["curve_steps"]
    for axis, (comparison, names) in zip(axes, COMPARISONS.items(), strict=True):
        for name, color in zip(names, ("tab:red", "tab:gray"), strict=True):
            curves = np.array([run["test_accuracy"] for run in results["runs"][name]])
            mean = curves.mean(0)
            std = curves.std(0, ddof=1) if len(curves) > 1 else np.zeros_like(mean)
            label = f"{name} ({results['models'][name]['parameters']:,} parameters)"
            axis.plot(steps, mean, color=color, label=label)
            axis.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2)
        difference = results["summary"]["differences"][comparison]
        axis.set_title(
            f"{names[0]} − {names[1]}, final: {difference['mean']:+.3f} ± {difference['std']:.3f}",
            fontsize="medium",
        )
        axis.set_xlabel("optimizer step")
        axis.legend(fontsize="small")
    axes[0].set_ylabel("test accuracy, first test images\n(mean ± 1 std over seeds)")
    figure.tight_layout()
    return figure
