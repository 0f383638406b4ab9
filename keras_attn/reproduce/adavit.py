"""AdaViT on Fashion-MNIST (Meng et al., CVPR 2022).

Per seed, pretrains a small ViT, then fine-tunes it for the same epochs as
the full ViT (so that the full model gets the same training budget as every
AdaViT) and as an AdaViT at each usage target γ. Reports, as mean ± std
over seeds, accuracy, measured MACs and measured fast-path latency (median
over interleaved rounds, batch 64) of the full ViT, of each AdaViT's learned
policy and of a random policy with the same measured usage per kind of gate
on the same fine-tuned model.
"""

import time

import numpy as np

from keras_attn.datasets import load_fashion_mnist
from keras_attn.models import finetune_adavit, finetune_vit, pretrain_vit
from keras_attn.models.adavit import FORMER_BEHAVIOUR, inference_function
from keras_attn.reproduce._run import choose_setting, finish, mean_and_std
from keras_attn.utils import batch_latency_ms
from keras_attn.utils.training import default_jit_compile, top1_accuracy
from keras_attn.utils.validation import float_option, int_option

NAME = "adavit"
HELP = "AdaViT on Fashion-MNIST: accuracy vs MACs and fast-path latency at several γ."

# The ViT's sizes; its depth is the setting's `num_layers`.
MODEL = {"patch_size": 4, "hidden_dim": 32, "num_heads": 4, "intermediate_dim": 64}
SETTINGS = {
    "small": {
        "train": 256,
        "test": 128,
        "seeds": 2,
        "pretrain_epochs": 1,
        "finetune_epochs": 1,
        "latency_rounds": 2,
        "num_layers": 2,  # one gated block: quick XLA compilations
    },
    "fast": {
        "train": 3000,
        "test": 1024,
        "seeds": 1,
        "pretrain_epochs": 3,
        "finetune_epochs": 2,
        "latency_rounds": 10,
        "num_layers": 5,
    },
    "full": {
        "train": 16000,
        "test": 5000,
        "seeds": 3,
        "pretrain_epochs": 8,
        "finetune_epochs": 4,
        "latency_rounds": 20,
        "num_layers": 5,
    },
}
LATENCY_BATCH = 64  # also the evaluation batch: one compiled fast path per policy
POLICIES = ("learned", "random")
MEASURES = ("accuracy", "macs", "latency_ms")
# Axes of `plot_tradeoff`: (measure, scale, label).
ACCURACY = ("accuracy", 1, "test accuracy")
MACS = ("macs", 1e-6, "MMACs per image")


def add_arguments(parser):
    parser.add_argument(
        "--gammas",
        type=float_option(0.0, 1.0, low_open=True),
        nargs="+",
        default=[0.3, 0.5, 0.7],
        help="usage targets γ, one fine-tuned model each (default: 0.3 0.5 0.7)",
    )
    parser.add_argument(
        "--seeds",
        type=int_option(),
        help="Number of seeds N: runs seeds 0..N-1 (overrides the setting).",
    )
    parser.add_argument(
        "--former-behaviour",
        choices=sorted(FORMER_BEHAVIOUR),
        nargs="+",
        default=[],
        help="AdaViT options set to keras_attn's former behaviour instead of the "
        "official one, to measure what each costs (default: none, all official).",
    )


def load_data(train, test):
    """Fashion-MNIST scaled to `[0, 1]`: `((x_train, y_train), (x_test, y_test))`."""
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist(limit=max(train, test))
    return (
        (x_train[:train].astype("float32") / 255.0, y_train[:train].astype("int32")),
        (x_test[:test].astype("float32") / 255.0, y_test[:test].astype("int32")),
    )


def run(args):
    started_at = time.time()
    size, setting = choose_setting(args, SETTINGS)
    seeds = args.seeds or setting["seeds"]
    data = load_data(setting["train"], setting["test"])
    options = {option: FORMER_BEHAVIOUR[option] for option in args.former_behaviour}
    runs, examples = [], {}
    for seed in range(seeds):
        runs.append(run_seed(seed, args.gammas, setting, data, examples, options))
    results = {
        "setting": {**setting, "name": size, "seeds": seeds, "latency_batch": LATENCY_BATCH},
        "adavit_options": options,
        "model": {**MODEL, "num_layers": setting["num_layers"]},
        "gammas": args.gammas,
        "runs": runs,
        "summary": summarize(runs),
    }
    figure = _figure(results, data[1][0][:6], examples)
    _print_summary(results)
    return finish(args, NAME, results, figure, started_at=started_at, setting=size)


def run_seed(seed, gammas, setting, data, examples, options):
    """One seed: the full ViT and, per γ, the learned and the random policy.

    `options` are `AdaViT` arguments that differ from the official defaults.
    """
    (x_train, y_train), (x_test, y_test) = data
    epochs = setting["finetune_epochs"]
    sizes = {**MODEL, "num_layers": setting["num_layers"]}
    jit_compile = default_jit_compile()
    vit = pretrain_vit(
        x_train,
        y_train,
        10,
        setting["pretrain_epochs"],
        seed=seed,
        jit_compile=jit_compile,
        **sizes,
    )
    full = finetune_vit(vit, x_train, y_train, epochs, seed=seed, jit_compile=jit_compile)
    record = {
        "seed": seed,
        "pretrained_accuracy": top1_accuracy(
            vit.predict(x_test, batch_size=256, verbose=0), y_test
        ),
        "full": {
            "accuracy": top1_accuracy(full.predict(x_test, batch_size=256, verbose=0), y_test)
        },
        "adavit": [],
    }
    predictors = {"full": inference_function(full)}
    for gamma in gammas:
        model = finetune_adavit(
            vit, x_train, y_train, gamma, epochs, seed=seed, jit_compile=jit_compile, **options
        )
        fast, chosen, random = run_policies(model, x_test, seed)
        record["full"]["macs"] = int(fast.full_macs())
        record["adavit"].append(
            {
                "gamma": gamma,
                **{
                    policy: policy_entry(model, result, y_test) for policy, result in chosen.items()
                },
            }
        )
        learned = chosen["learned"]
        predictors[f"{gamma} learned"] = fast.predictor()
        fixed = {key: value[:LATENCY_BATCH] for key, value in random.items()}
        predictors[f"{gamma} random"] = fast.predictor(fixed)
        if seed == 0:
            examples[gamma] = learned.decisions["patches"][:6]
    latency = batch_latency_ms(predictors, x_test, LATENCY_BATCH, setting["latency_rounds"])
    record["full"]["latency_ms"] = latency["full"]
    for entry in record["adavit"]:
        for policy in POLICIES:
            entry[policy]["latency_ms"] = latency[f"{entry['gamma']} {policy}"]
    return record


def run_policies(model, x, seed):
    """The fast path of `model` run on `x` with its learned and with random decisions.

    The random decisions keep, per kind, the share that the learned ones
    keep on `x` (`AdaViT.usage`), drawn with `seed`.

    Returns:
        `(fast, results, random)`: the `AdaViTFastPath`, a dict of its
        `FastPathResult` per policy of `POLICIES`, and the random decisions.
    """
    fast = model.fast_path()
    learned = fast.run(x, batch_size=LATENCY_BATCH)
    random = model.random_decisions(len(x), model.usage(learned.decisions), seed=seed)
    return fast, {"learned": learned, "random": fast.run(x, random, LATENCY_BATCH)}, random


def policy_results(model, x, y, seed):
    """Accuracy, mean MACs and usage on `(x, y)` of `model`'s learned and random policies."""
    _, results, _ = run_policies(model, x, seed)
    return {policy: policy_entry(model, result, y) for policy, result in results.items()}


def policy_entry(model, result, labels):
    """Accuracy against `labels`, mean MACs and usage of a `FastPathResult` of `model`."""
    return {
        "accuracy": top1_accuracy(result.outputs, labels),
        "macs": float(result.macs.mean()),
        "usage": model.usage(result.decisions),
    }


def summarize(runs):
    """Mean ± std over seeds of every model's accuracy, MACs and latency."""
    summary = {
        "pretrained_accuracy": mean_and_std([run["pretrained_accuracy"] for run in runs]),
        "full": {m: mean_and_std([run["full"][m] for run in runs]) for m in MEASURES},
        "adavit": [],
    }
    for index, entry in enumerate(runs[0]["adavit"]):
        per_seed = [run["adavit"][index] for run in runs]
        summary["adavit"].append(
            {"gamma": entry["gamma"]}
            | {policy: _policy_summary([e[policy] for e in per_seed]) for policy in POLICIES}
        )
    return summary


def _policy_summary(entries):
    """Mean ± std of each measure over seeds, and the mean usage per kind."""
    summary = {m: mean_and_std([entry[m] for entry in entries]) for m in MEASURES}
    usages = [entry["usage"] for entry in entries]
    summary["usage"] = {key: float(np.mean([u[key] for u in usages])) for key in usages[0]}
    return summary


def _figure(results, images, examples):
    import matplotlib.pyplot as plt

    figure = plt.figure(figsize=(12, 7))
    grid = figure.add_gridspec(2 + len(examples), 6, height_ratios=[3, 0.2] + [1] * len(examples))
    compute_axis = figure.add_subplot(grid[0, :3])
    latency_axis = figure.add_subplot(grid[0, 3:])
    batch = results["setting"]["latency_batch"]
    plot_tradeoff(compute_axis, results["summary"], MACS, ACCURACY)
    plot_tradeoff(latency_axis, results["summary"], latency(batch), ACCURACY)
    for row, (gamma, kept) in enumerate(examples.items()):
        for column, image in enumerate(images):
            axis = figure.add_subplot(grid[2 + row, column])
            _plot_policy(axis, image, kept[column])
            if column == 0:
                axis.set_ylabel(f"γ={gamma}", fontsize=8)
    seeds = results["setting"]["seeds"]
    figure.suptitle(
        f"AdaViT on Fashion-MNIST, mean ± std over {seeds} seeds; "
        "bottom: share of gated blocks keeping each patch (seed 0)"
    )
    return figure


def plot_tradeoff(axis, summary, x, y):
    """`y` against `x` for the full ViT and both policies, error bars over seeds.

    `summary` is a result's `"summary"`; `x` and `y` are `(measure, scale,
    label)`: a key of `MEASURES`, the factor that its values are shown at and
    the axis label (`ACCURACY`, `MACS`, `latency(batch)`). The docs figure of
    the committed result draws with it too.
    """
    (x_key, x_scale, x_label), (y_key, y_scale, y_label) = x, y

    def errorbar(points, style, **kwargs):
        axis.errorbar(
            [point[x_key]["mean"] * x_scale for point in points],
            [point[y_key]["mean"] * y_scale for point in points],
            xerr=[point[x_key]["std"] * x_scale for point in points],
            yerr=[point[y_key]["std"] * y_scale for point in points],
            fmt=style,
            **kwargs,
        )

    for policy, style in (("learned", "o-"), ("random", "s--")):
        errorbar(
            [entry[policy] for entry in summary["adavit"]], style, label=f"AdaViT, {policy} policy"
        )
    errorbar([summary["full"]], "k*", markersize=12, label="full ViT (same training budget)")
    for entry in summary["adavit"]:
        point = entry["learned"]
        xy = (point[x_key]["mean"] * x_scale, point[y_key]["mean"] * y_scale)
        axis.annotate(f"γ={entry['gamma']}", xy, fontsize=8)
    axis.set_xlabel(x_label)
    axis.set_ylabel(y_label)
    axis.legend(fontsize=8)


def latency(batch):
    """The latency axis of `plot_tradeoff`, in ms per batch of `batch`."""
    return ("latency_ms", 1, f"ms per batch of {batch}")


def _plot_policy(axis, image, kept):
    side = int(np.sqrt(kept.shape[-1]))
    share = kept.mean(0).reshape(side, side)  # (rows, columns) of patches
    axis.imshow(image, cmap="gray")
    axis.imshow(share, cmap="viridis", alpha=0.5, vmin=0, vmax=1, extent=(-0.5, 27.5, 27.5, -0.5))
    axis.set_xticks([])
    axis.set_yticks([])


def _print_summary(results):
    summary = results["summary"]

    def line(name, entry):
        return (
            f"{name}: accuracy {entry['accuracy']['mean']:.4f} ± {entry['accuracy']['std']:.4f}, "
            f"{entry['macs']['mean'] / 1e6:.2f} MMACs, "
            f"{entry['latency_ms']['mean']:.2f} ± {entry['latency_ms']['std']:.2f} ms"
        )

    print(line("full ViT", summary["full"]))
    for entry in summary["adavit"]:
        for policy in POLICIES:
            print(line(f"γ={entry['gamma']} {policy}", entry[policy]))
