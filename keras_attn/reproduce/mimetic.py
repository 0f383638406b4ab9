"""Mimetic initialization (Trockman & Kolter, ICML 2023): does it help a small ViT?

Paper: "Mimetic Initialization of Self-Attention Layers",
https://arxiv.org/abs/2305.09828. Two parts:

1. Training: a Vision Transformer trained from scratch on Fashion-MNIST
   (real images that ship offline; no CIFAR-10 package exists), with light
   augmentation (shifts of up to 2 pixels, left-right flips), once with the
   default (Glorot) attention kernels and once with `apply_mimetic_init`,
   for paired seeds and the same number of optimizer steps. The seed fixes
   the model's other weights, the data order and the augmentation, so each
   pair differs only in the attention kernels and biases. Each training-set
   size (the full setting adds a small-data regime) and each position
   embedding (learned, fixed 2D sine-cosine) is one experiment; the result
   gives test-accuracy curves, mean ± std per initialization and the paired
   difference (mimetic − default, per seed) with its spread.
2. Analysis: the per-head diagonal statistics of `W_q W_kᵀ` and `W_v W_o` in
   the pretrained all-MiniLM-L6-v2 weights, the pattern that motivated the
   initialization.
"""

import time

import keras
import numpy as np

from keras_attn.analysis import attention_diagonal_statistics
from keras_attn.datasets import load_cifar10, load_fashion_mnist
from keras_attn.initializers import MimeticInitializer, apply_mimetic_init
from keras_attn.models import build_vision_transformer
from keras_attn.pretrained import load_minilm_weights
from keras_attn.reproduce._images import fit_augmented, paired_difference, standardized_subsets
from keras_attn.reproduce._run import add_seeds_argument, choose_setting, finish, mean_and_std
from keras_attn.utils import finish_run
from keras_attn.utils.training import RECIPE, compile_classifier, curve_steps, reset_optimizer
from keras_attn.utils.validation import int_option

NAME = "mimetic"
HELP = "Small ViT on Fashion-MNIST: default vs mimetic attention init; MiniLM weight analysis."

INITS = ("default", "mimetic")
POSITION_EMBEDDINGS = ("learned", "sincos")
DATASETS = ("fashion_mnist", "cifar10")
# Each regime is a training-set size and its optimizer steps per run; test
# accuracy is measured `evaluations` times on the first `curve_test_size`
# test images (the curve) and once at the end on `test_size` images (the
# final accuracy). One experiment per regime and position embedding.
SETTINGS = {
    # KERAS_ATTN_SMALL (tests, notebooks): seconds.
    "small": {
        "regimes": ({"train_size": 512, "steps": 12},),
        "curve_test_size": 128,
        "test_size": 256,
        "evaluations": 3,
        "seeds": 2,
        "hidden_dim": 32,
        "num_layers": 2,
        "intermediate_dim": 64,
        "position_embeddings": ("learned",),
    },
    # The default CLI setting: a quick look, a few minutes on 2 idle cores.
    "fast": {
        "regimes": ({"train_size": 1000, "steps": 80},),
        "curve_test_size": 1000,
        "test_size": 2000,
        "evaluations": 8,
        "seeds": 3,
        "hidden_dim": 64,
        "num_layers": 4,
        "intermediate_dim": 128,
        "position_embeddings": POSITION_EMBEDDINGS,
    },
    # `--full`: 8,000 images for 500 steps (8 epochs, where the default
    # model's test accuracy levels off) and a small-data regime, 1,000
    # images for 250 steps (32 epochs); about 35 minutes on 2 idle cores.
    "full": {
        "regimes": ({"train_size": 8000, "steps": 500}, {"train_size": 1000, "steps": 250}),
        "curve_test_size": 2000,
        "test_size": 10000,
        "evaluations": 10,
        "seeds": 3,
        "hidden_dim": 64,
        "num_layers": 4,
        "intermediate_dim": 128,
        "position_embeddings": POSITION_EMBEDDINGS,
    },
}
MODEL = {"patch_size": 4, "num_heads": 4}
BATCH_SIZE = 128


def add_arguments(parser):
    add_seeds_argument(parser)
    parser.add_argument(
        "--steps",
        type=int_option(),
        help="Optimizer steps per run in every regime (overrides the setting).",
    )
    parser.add_argument(
        "--train-sizes",
        type=int_option(),
        nargs="+",
        help="Training-set sizes, one regime each, with the first regime's steps unless "
        "--steps is given (overrides the setting).",
    )
    parser.add_argument(
        "--position-embeddings",
        choices=POSITION_EMBEDDINGS,
        nargs="+",
        help="Position embeddings of the ViT, one experiment each (default: both).",
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
    chosen = dict(sizes, name=name, dataset=getattr(args, "dataset", "fashion_mnist"))
    for key in ("seeds", "position_embeddings"):
        if getattr(args, key, None) is not None:
            chosen[key] = getattr(args, key)
    steps = getattr(args, "steps", None)
    regimes = [dict(regime) for regime in chosen["regimes"]]
    if getattr(args, "train_sizes", None) is not None:
        regimes = [{"train_size": n, "steps": regimes[0]["steps"]} for n in args.train_sizes]
    for regime in regimes:
        regime["steps"] = steps or regime["steps"]
        if regime["steps"] % chosen["evaluations"]:
            raise ValueError(
                f"argument --steps: must be a multiple of {chosen['evaluations']}, the number "
                f"of evaluations of the {name!r} setting. Received: steps={regime['steps']}"
            )
    chosen["regimes"] = tuple(regimes)
    chosen["position_embeddings"] = tuple(chosen["position_embeddings"])
    return chosen


def check_arguments(args):
    """Refuses, before anything trains, options that only the setting can check.

    Raises:
        ValueError: when `--steps` (or the setting's steps of a regime) is
            not a multiple of the setting's number of evaluations.
    """
    setting(args)


def run(args):
    started_at = time.time()
    chosen = setting(args)
    largest = max(regime["train_size"] for regime in chosen["regimes"])
    x_train, y_train, x_test, y_test = load_data(largest, chosen["test_size"], chosen["dataset"])
    print(
        f"Setting {chosen['name']!r} on {chosen['dataset']}: regimes {chosen['regimes']}, "
        f"{chosen['test_size']} test images, {chosen['seeds']} paired seeds, "
        f"positions {chosen['position_embeddings']}."
    )
    experiments = []
    for regime in chosen["regimes"]:
        size = regime["train_size"]
        data = (x_train[:size], y_train[:size], x_test, y_test)
        for position_embedding in chosen["position_embeddings"]:
            experiments.append(compare_inits(data, chosen, position_embedding, regime["steps"]))
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
    training = {
        "setting": chosen,
        "model": MODEL,
        **RECIPE,
        "batch_size": BATCH_SIZE,
        "experiments": experiments,
    }
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
    return standardized_subsets(loader(), train_size, test_size)


def build_model(chosen, position_embedding, image_shape=(28, 28)):
    return build_vision_transformer(
        image_shape,
        10,
        hidden_dim=chosen["hidden_dim"],
        num_layers=chosen["num_layers"],
        intermediate_dim=chosen["intermediate_dim"],
        position_embedding=position_embedding,
        **MODEL,
    )


def compare_inits(data, chosen, position_embedding, steps):
    """Trains both initializations for every seed on `data`; one experiment's results.

    Returns:
        dict with the experiment's `train_size`, `position_embedding` and
        total `steps`, `curve_steps` (the step count at each evaluation),
        `runs` (per init, one entry per seed with its test-accuracy curve on
        the first `curve_test_size` test images and its final accuracy on
        all test images) and `summary`.
    """
    x_train = data[0]
    model = compile_model(chosen, position_embedding, steps, image_shape=x_train.shape[1:])
    runs = {init: [] for init in INITS}
    for seed in range(chosen["seeds"]):
        for init in INITS:
            reset(model, chosen, position_embedding, seed, init)
            run = fit_augmented(
                model,
                data,
                BATCH_SIZE,
                steps,
                chosen["evaluations"],
                chosen["curve_test_size"],
                seed,
            )
            runs[init].append({"seed": seed, **run})
            final = run["final_test_accuracy"]
            print(
                f"{len(x_train):>6} images, {position_embedding:>7} positions, {init:>8} "
                f"seed {seed}: test accuracy {final:.4f}"
            )
    summary = summarize(runs)
    print(
        f"{len(x_train):>6} images, {position_embedding:>7} positions: mimetic − default "
        f"{summary['difference']['mean']:+.4f} ± {summary['difference']['std']:.4f} (paired)"
    )
    return {
        "train_size": len(x_train),
        "position_embedding": position_embedding,
        "steps": steps,
        "curve_steps": curve_steps(steps, chosen["evaluations"]),
        "runs": runs,
        "summary": summary,
    }


def compile_model(chosen, position_embedding, steps, image_shape=(28, 28)):
    """One compiled model, reused by every run of an experiment (compiling once saves time).

    AdamW with a linear warm-up over the first 10% of the steps and a cosine
    decay. The learning rate is a schedule, so the optimizer's state is only
    its iteration count and moments, which `reset` sets back to zero.
    """
    return compile_classifier(build_model(chosen, position_embedding, image_shape), steps)


def reset(model, chosen, position_embedding, seed, init):
    """Fresh weights drawn under `seed` (then `init`) and a fresh optimizer state.

    The seed fixes every weight outside the attention kernels, so the two
    initializations of one seed differ only there (the data order and the
    augmentation come from the seed of `AugmentedImages`).
    """
    keras.utils.set_random_seed(seed)
    image_shape = model.input_shape[1:]
    model.set_weights(build_model(chosen, position_embedding, image_shape).get_weights())
    if init == "mimetic":
        apply_mimetic_init(model, MimeticInitializer(seed=seed))
    reset_optimizer(model)
    keras.utils.set_random_seed(seed)


def summarize(runs):
    """Final test accuracy per init (mean ± std over seeds) and the paired difference.

    `difference` holds mimetic − default per seed (`per_seed`), their mean
    and their standard deviation (`ddof=1`; 0 for one seed).
    """
    finals = {init: [run["final_test_accuracy"] for run in runs[init]] for init in INITS}
    summary = {init: mean_and_std(finals[init]) for init in INITS}
    summary["difference"] = paired_difference(finals["mimetic"], finals["default"])
    return summary


def plot_curves(training):
    import matplotlib.pyplot as plt

    experiments = training["experiments"]
    figure, axes = plt.subplots(
        1, len(experiments), figsize=(4.2 * len(experiments), 3.4), squeeze=False
    )
    for axis, experiment in zip(axes[0], experiments, strict=True):
        for init, color in zip(INITS, ("tab:gray", "tab:red"), strict=True):
            curves = np.array([run["test_accuracy"] for run in experiment["runs"][init]])
            mean, std = curves.mean(0), curves.std(0)
            steps = experiment["curve_steps"]
            axis.plot(steps, mean, color=color, label=f"{init} init")
            axis.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2)
        axis.set_title(
            f"{experiment['train_size']} images, {experiment['position_embedding']} positions"
        )
        axis.set_xlabel("optimizer step")
    axes[0][0].set_ylabel("test accuracy, first test images (mean ± 1 std)")
    axes[0][0].legend()
    figure.tight_layout()
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
