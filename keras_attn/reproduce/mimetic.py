"""Mimetic initialization (Trockman & Kolter, ICML 2023): does it help a small ViT?

Paper: "Mimetic Initialization of Self-Attention Layers",
https://arxiv.org/abs/2305.09828. Two parts:

1. Training: a Vision Transformer trained from scratch on a small subset of
   Fashion-MNIST, once with the default (Glorot) attention kernels and once
   with `apply_mimetic_init`, for several seeds and the same budget. The
   seed fixes the model's other weights and the data order, so each pair
   differs only in the attention kernels and biases. Reports mean ± std test
   accuracy and test-accuracy curves.
2. Analysis: the per-head diagonal statistics of `W_q W_kᵀ` and `W_v W_o` in
   the pretrained all-MiniLM-L6-v2 weights, the pattern that motivated the
   initialization.
"""

import math
import time

import keras
import numpy as np

from keras_attn.analysis import attention_diagonal_statistics
from keras_attn.datasets import load_cifar10, load_fashion_mnist
from keras_attn.initializers import MimeticInitializer, apply_mimetic_init
from keras_attn.models import build_vision_transformer
from keras_attn.pretrained import load_minilm_weights
from keras_attn.reproduce._run import choose_setting, finish
from keras_attn.utils import finish_run

NAME = "mimetic"
HELP = "Small ViT on Fashion-MNIST: default vs mimetic attention init; MiniLM weight analysis."

INITS = ("default", "mimetic")
DATASETS = ("fashion_mnist", "cifar10")
SETTINGS = {
    # KERAS_ATTN_SMALL (tests, notebooks): seconds.
    "small": {"train_size": 512, "test_size": 256, "epochs": 3, "seeds": 3, "dim": 32, "depth": 2},
    # The default CLI setting: a quick look, a few minutes on 2 idle cores.
    "fast": {
        "train_size": 1000,
        "test_size": 2000,
        "epochs": 10,
        "seeds": 3,
        "dim": 64,
        "depth": 4,
    },
    # `--full`: the documented setting.
    "full": {
        "train_size": 4000,
        "test_size": 5000,
        "epochs": 12,
        "seeds": 3,
        "dim": 64,
        "depth": 4,
    },
}
MODEL = {"patch_size": 4, "num_heads": 4, "mlp_ratio": 2.0}
BATCH_SIZE = 128
OPTIMIZER = {
    "name": "AdamW",
    "learning_rate": 1e-3,
    "weight_decay": 0.05,
    "schedule": "warm-up 1 epoch, cosine",
}


def add_arguments(parser):
    parser.add_argument(
        "--seeds", type=int, help="Number of seeds N: runs seeds 0..N-1 (overrides the setting)."
    )
    parser.add_argument("--epochs", type=int, help="Training epochs (overrides the setting).")
    parser.add_argument("--train-size", type=int, help="Training images (overrides the setting).")
    parser.add_argument(
        "--position-embedding",
        choices=("learned", "sincos"),
        default="learned",
        help="Position embedding of the ViT.",
    )
    parser.add_argument(
        "--dataset",
        choices=DATASETS,
        default="fashion_mnist",
        help="fashion_mnist (installed by dataset-fashion-mnist) or cifar10 (a copy you "
        "supply, see KERAS_ATTN_CIFAR10_DIR).",
    )


def setting(args):
    """The size setting for `args`: small, fast or full, with overrides."""
    name, sizes = choose_setting(args, SETTINGS)
    chosen = dict(
        sizes,
        name=name,
        dataset=getattr(args, "dataset", "fashion_mnist"),
        position_embedding=getattr(args, "position_embedding", "learned"),
    )
    for key in ("seeds", "epochs", "train_size"):
        if getattr(args, key, None) is not None:
            chosen[key] = getattr(args, key)
    return chosen


def run(args):
    started_at = time.time()
    chosen = setting(args)
    data = load_data(chosen["train_size"], chosen["test_size"], chosen["dataset"])
    print(
        f"Setting {chosen['name']!r} on {chosen['dataset']}: "
        f"{chosen['train_size']} training images, "
        f"{chosen['test_size']} test images, {chosen['epochs']} epochs, {chosen['seeds']} seeds."
    )
    training = compare_inits(data, chosen)
    analysis = analyze_minilm()
    # The MiniLM analysis goes to its own file beside the training result.
    finish_run(
        args.out,
        f"{NAME}_minilm",
        analysis,
        plot_minilm(analysis),
        started_at=started_at,
        setting=chosen["name"],
    )
    for init in INITS:
        summary = training["summary"][init]
        print(f"{init:>8}: test accuracy {summary['mean']:.4f} ± {summary['std']:.4f}")
    print(f"mimetic − default: {training['summary']['difference']:+.4f}")
    return finish(
        args, NAME, training, plot_curves(training), started_at=started_at, setting=chosen["name"]
    )


def load_data(train_size, test_size, dataset="fashion_mnist"):
    """Train and test subsets, scaled to zero mean and unit variance.

    Returns:
        `(x_train, y_train, x_test, y_test)`; images keep their loader shape,
        `(n, 28, 28)` for Fashion-MNIST and `(n, 32, 32, 3)` for CIFAR-10.
    """
    loader = load_cifar10 if dataset == "cifar10" else load_fashion_mnist
    (x_train, y_train), (x_test, y_test) = loader()
    x_train = x_train[:train_size].astype("float32") / 255.0
    x_test = x_test[:test_size].astype("float32") / 255.0
    mean, std = x_train.mean(), x_train.std()
    return (x_train - mean) / std, y_train[:train_size], (x_test - mean) / std, y_test[:test_size]


def build_model(chosen, image_shape=(28, 28)):
    return build_vision_transformer(
        image_shape,
        10,
        dim=chosen["dim"],
        depth=chosen["depth"],
        position_embedding=chosen.get("position_embedding", "learned"),
        **MODEL,
    )


def compare_inits(data, chosen):
    """Trains each initialization for every seed; returns curves and summaries."""
    x_train, y_train, x_test, y_test = data
    steps_per_epoch = math.ceil(len(x_train) / BATCH_SIZE)
    model = compile_model(chosen, steps_per_epoch, image_shape=x_train.shape[1:])
    runs = {init: [] for init in INITS}
    for seed in range(chosen["seeds"]):
        for init in INITS:
            reset(model, chosen, seed, init)
            start = time.perf_counter()
            history = model.fit(
                x_train,
                y_train,
                batch_size=BATCH_SIZE,
                epochs=chosen["epochs"],
                validation_data=(x_test, y_test),
                verbose=0,
            )
            accuracy = history.history["val_accuracy"]
            runs[init].append(
                {
                    "seed": seed,
                    "test_accuracy": accuracy,
                    "train_accuracy": history.history["accuracy"],
                    "seconds": time.perf_counter() - start,
                }
            )
            print(f"{init:>8} seed {seed}: test accuracy {accuracy[-1]:.4f}")
    return {
        "setting": chosen,
        "model": MODEL,
        "optimizer": OPTIMIZER,
        "runs": runs,
        "summary": summarize(runs),
    }


def compile_model(chosen, steps_per_epoch, image_shape=(28, 28)):
    """One compiled model, reused by every run (compiling once saves time).

    AdamW with a linear warm-up over the first epoch and a cosine decay. The
    learning rate is a schedule, so the optimizer's state is only its
    iteration count and moments, which `reset` sets back to zero.
    """
    total_steps = chosen["epochs"] * steps_per_epoch
    schedule = keras.optimizers.schedules.CosineDecay(
        0.0,
        decay_steps=max(1, total_steps - steps_per_epoch),
        warmup_target=OPTIMIZER["learning_rate"],
        warmup_steps=steps_per_epoch,
    )
    model = build_model(chosen, image_shape)
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=OPTIMIZER["weight_decay"]),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=True,
    )
    return model


def reset(model, chosen, seed, init):
    """Fresh weights drawn under `seed` (then `init`) and a fresh optimizer state.

    The seed fixes every weight outside the attention kernels and the data
    order, so the two initializations of one seed differ only there.
    """
    keras.utils.set_random_seed(seed)
    image_shape = model.input_shape[1:]
    model.set_weights(build_model(chosen, image_shape).get_weights())
    if init == "mimetic":
        apply_mimetic_init(model, MimeticInitializer(seed=seed))
    if model.optimizer.built:
        for variable in model.optimizer.variables:
            variable.assign(np.zeros(variable.shape, variable.dtype))
    keras.utils.set_random_seed(seed)


def summarize(runs):
    """Mean ± std (over seeds) of the final test accuracy per initialization."""
    summary = {}
    for init, seeds in runs.items():
        final = np.array([run["test_accuracy"][-1] for run in seeds])
        summary[init] = {"mean": final.mean(), "std": final.std(ddof=1) if len(final) > 1 else 0.0}
    summary["difference"] = summary["mimetic"]["mean"] - summary["default"]["mean"]
    return summary


def plot_curves(training):
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5.5, 3.5))
    for init, color in zip(INITS, ("tab:gray", "tab:red"), strict=True):
        curves = np.array([run["test_accuracy"] for run in training["runs"][init]])
        epochs = np.arange(1, curves.shape[1] + 1)
        mean, std = curves.mean(0), curves.std(0)
        axis.plot(epochs, mean, color=color, label=f"{init} init")
        axis.fill_between(epochs, mean - std, mean + std, color=color, alpha=0.2)
    chosen = training["setting"]
    axis.set_xlabel("epoch")
    axis.set_ylabel("test accuracy")
    axis.set_title(
        f"ViT ({chosen.get('position_embedding', 'learned')} positions), "
        f"{chosen['train_size']} {chosen.get('dataset', 'fashion_mnist')} training images, "
        f"{chosen['seeds']} seeds, ±1 std"
    )
    axis.legend()
    return figure


def analyze_minilm():
    """Diagonal statistics of every layer and head of all-MiniLM-L6-v2."""
    weights = load_minilm_weights()
    kernels = [weights.attention_kernels(layer) for layer in range(weights.num_layers)]
    return {
        "model": "all-MiniLM-L6-v2",
        "num_layers": weights.num_layers,
        "num_heads": weights.num_heads,
        **attention_diagonal_statistics(kernels),
    }


def plot_minilm(analysis):
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(1, 3, figsize=(13, 3.3), width_ratios=(1, 1, 0.6))
    panels = (
        ("query_key_per_head", "W_q W_kᵀ per head"),
        ("value_output_per_head", "W_v W_o per head"),
    )
    for axis, (key, title) in zip(axes[:2], panels, strict=True):
        scores = np.array(analysis[key]["diagonal_score"])  # (layers, heads)
        limit = np.abs(scores).max()
        image = axis.imshow(scores, cmap="RdBu_r", vmin=-limit, vmax=limit)
        axis.set_xlabel("head")
        axis.set_ylabel("layer")
        axis.set_title(f"{title}: diagonal score")
        figure.colorbar(image, ax=axis, fraction=0.04)
    layer_scores = np.array(analysis["value_output_per_layer"]["diagonal_score"])
    axes[2].bar(np.arange(len(layer_scores)), layer_scores, color="tab:purple")
    axes[2].axhline(0, color="black", linewidth=0.8)
    axes[2].set_xlabel("layer")
    axes[2].set_title("W_v W_o, all heads")
    figure.suptitle(
        "all-MiniLM-L6-v2: mean diagonal / off-diagonal std (red: positive, blue: negative)",
        y=1.05,
    )
    return figure
