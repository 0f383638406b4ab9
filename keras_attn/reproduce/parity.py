"""Length generalisation with log-length scaled attention (Chiang & Cholak, 2022).

"Overcoming a Theoretical Limitation of Self-Attention", Section 7: a
transformer trained on FIRST (is the first bit 1?) at short lengths often
fails on much longer strings, because the attention it learned to put on
the first bit is diluted by the extra positions. Multiplying the attention
logits by `log n` fixes this. The paper trains on n = 50 and tests on
n = 1000: about 0.89 mean accuracy without scaling, about 1.00 with it.

This reproduction trains `build_bit_string_classifier` with and without
`logit_scale="log_length"` for several training lengths and seeds, tests at
a long length, and reports the mean and median test accuracy and the number
of seeds at 100%. PARITY, which the paper's learned transformers do not
learn, is tried the same way. The full setting is the official protocol:
train length 50, batch 1, 10k Adam steps at 3e-4, 20 seeds, test at
n = 1000; FIRST with the model of the official `first.py` (1 head, the fixed
positional feature `[i = 1]`), PARITY with 2 heads and learned-scale
position encodings (`LearnedScalePositions`).
`--steps` and `--seeds` reduce it (recorded under `"overrides"`).

Every run also records the share of test strings it calls positive and the
spread of its logits: a constant predictor (share 0 or 1) scores the class
balance of the test strings whatever its weights, so two constant
predictors of the same class give identical accuracies.
"""

import time

import keras
import numpy as np

from keras_attn.datasets.bit_strings import make_bit_strings
from keras_attn.models.bit_string_classifier import bit_string_logits, build_bit_string_classifier
from keras_attn.reproduce._run import add_seeds_argument, choose_setting, finish, run_in_workers
from keras_attn.utils.training import build_optimizer, default_jit_compile
from keras_attn.utils.validation import float_option, int_option

NAME = "parity"
HELP = "FIRST/PARITY length generalisation with and without log-length scaled attention."
SCALES = ("none", "log_length")
TASKS = ("first", "parity")

SETTINGS = {
    # The official protocol (batch 1, Adam 3e-4, 10k steps, test n = 1000). FIRST as in the
    # official first.py: 1 head and the fixed feature [i = 1]. PARITY: 2 heads and
    # learned-scale positions (the official PARITY script is an exploratory curriculum).
    "full": {
        "first_train_lengths": [50],
        "parity_train_lengths": [50],
        "test_length": 1000,
        "first_seeds": 20,
        "parity_seeds": 20,
        "steps": 10_000,
        "batch_size": 1,
        "test_strings": 100,
        "first_num_heads": 1,
        "first_positions": "fixed",
        "parity_num_heads": 2,
        "parity_positions": "learned_scale",
        "learning_rate": 3e-4,
    },
    "fast": {
        "first_train_lengths": [10, 20],
        "parity_train_lengths": [],
        "test_length": 200,
        "first_seeds": 2,
        "parity_seeds": 0,
        "steps": 300,
        "batch_size": 16,
        "test_strings": 100,
        "first_num_heads": 1,
        "first_positions": "fixed",
        "parity_num_heads": 1,
        "parity_positions": "fixed",
        "learning_rate": 1e-3,
    },
    "small": {
        "first_train_lengths": [10],
        "parity_train_lengths": [],
        "test_length": 50,
        "first_seeds": 1,
        "parity_seeds": 0,
        "steps": 20,
        "batch_size": 8,
        "test_strings": 16,
        "first_num_heads": 1,
        "first_positions": "fixed",
        "parity_num_heads": 1,
        "parity_positions": "fixed",
        "learning_rate": 1e-3,
    },
}


def add_arguments(parser):
    parser.add_argument(
        "--learning-rate",
        type=float_option(0.0, low_open=True),
        default=None,
        help="Adam learning rate (the setting's).",
    )
    add_seeds_argument(parser, "per setting; the setting's by default")
    parser.add_argument(
        "--steps", type=int_option(), default=None, help="Training steps per run (the setting's)."
    )
    parser.add_argument(
        "--tasks", nargs="+", choices=TASKS, default=list(TASKS), help="Tasks to train."
    )
    parser.add_argument(
        "--train-lengths",
        type=int_option(),
        nargs="+",
        default=None,
        help="Training lengths (all tasks).",
    )
    parser.add_argument(
        "--workers",
        type=int_option(),
        default=1,
        help="processes that train the (task, length, attention) groups side by side, each "
        "on one thread on TF and torch (default: 1). A batch-1 step of these tiny models "
        "keeps one core busy, so 2 workers on 2 cores about halve the run; the results do "
        "not change.",
    )


def run(args):
    size, chosen = choose_setting(args, SETTINGS)
    setting = dict(chosen)
    overrides = {}
    if getattr(args, "seeds", None) is not None:
        overrides["first_seeds"] = args.seeds
        if setting["parity_seeds"]:
            overrides["parity_seeds"] = args.seeds
    if getattr(args, "steps", None) is not None:
        overrides["steps"] = args.steps
    if getattr(args, "learning_rate", None) is not None:
        overrides["learning_rate"] = args.learning_rate
    setting.update(overrides)
    for task in TASKS:
        if task not in args.tasks:
            setting[f"{task}_train_lengths"] = []
        elif args.train_lengths and setting[f"{task}_train_lengths"]:
            setting[f"{task}_train_lengths"] = list(args.train_lengths)
    workers = getattr(args, "workers", 1)
    if workers < 1:
        raise ValueError(f"`--workers` must be at least 1. Received: workers={workers}")
    start = time.time()
    groups = [
        (task, length, scale)
        for task in TASKS
        for length in setting[f"{task}_train_lengths"]
        for scale in SCALES
    ]
    runs = [run_ for group in train_groups(groups, setting, workers) for run_ in group]
    summary = summarise(runs)
    for row in summary:
        print(
            f"{row['task']:>6} train n={row['train_length']:<3} {row['logit_scale']:>10}: "
            f"test acc (n={setting['test_length']}) mean {row['mean_test_accuracy']:.3f} "
            f"median {row['median_test_accuracy']:.3f}, {row['seeds_at_100']} at 100%, "
            f"train-length acc {row['mean_train_length_accuracy']:.3f} over {row['seeds']} seeds, "
            f"{row['constant_predictors']} constant predictors"
        )
    results = {
        "setting": setting,
        "overrides": overrides,
        "learning_rate": setting["learning_rate"],
        "summary": summary,
        "runs": runs,
        "seconds": round(time.time() - start, 1),
    }
    figure = plot(summary, setting["test_length"])
    return finish(args, NAME, results, figure, started_at=start, setting=size)


def train_groups(groups, setting, workers):
    """`train_and_test` of every `(task, length, scale)` group, in order.

    With `workers` above 1 the groups train in that many fresh processes of
    one thread each (`run_in_workers`); every run seeds itself, so the
    results are the same.
    """
    return run_in_workers(train_and_test, [(*group, setting) for group in groups], workers)


def train_and_test(task, train_length, logit_scale, setting):
    """Trains one compiled model per setting; each seed restarts its weights.

    Compiling once and resetting the weights and the optimizer for every
    seed keeps the run short (compiling dominates for models this small).
    Torch runs eagerly, one step per execution (all that Keras allows there).
    """
    model = build(task, logit_scale, setting)
    on_torch = keras.backend.backend() == "torch"
    model.compile(
        keras.optimizers.Adam(setting["learning_rate"]),
        keras.losses.BinaryCrossentropy(from_logits=True),
        jit_compile=default_jit_compile(),
        steps_per_execution=1 if on_torch else min(50, setting["steps"]),
    )
    build_optimizer(model)
    runs = []
    for seed in range(setting[f"{task}_seeds"]):
        restart(model, task, logit_scale, seed, setting)
        steps, batch_size = setting["steps"], setting["batch_size"]
        tokens, labels = make_bit_strings(steps * batch_size, train_length, task, seed=seed)
        model.fit(tokens, labels, batch_size=batch_size, epochs=1, shuffle=False, verbose=0)
        test = evaluate(model, task, setting["test_length"], setting, seed)
        runs.append(
            {
                "task": task,
                "train_length": train_length,
                "logit_scale": logit_scale,
                "seed": seed,
                "train_length_accuracy": evaluate(model, task, train_length, setting, seed)[
                    "accuracy"
                ],
                "test_accuracy": test["accuracy"],
                "test_positive_share": test["positive_share"],
                "test_logit_std": test["logit_std"],
                "test_label_share": test["label_share"],
            }
        )
        print(
            f"{task} n={train_length} {logit_scale} seed {seed}: "
            f"test accuracy {runs[-1]['test_accuracy']:.3f}",
            flush=True,
        )
    return runs


def build(task, logit_scale, setting):
    return build_bit_string_classifier(
        task,
        num_heads=setting[f"{task}_num_heads"],
        logit_scale=logit_scale,
        positions=setting[f"{task}_positions"],
    )


def restart(model, task, logit_scale, seed, setting):
    """Fresh initial weights for `seed` and a fresh Adam state."""
    keras.utils.set_random_seed(seed)
    fresh = build(task, logit_scale, setting)
    model.set_weights(fresh.get_weights())
    for variable in model.optimizer.variables:
        if "learning_rate" not in variable.path:
            variable.assign(np.zeros(variable.shape, variable.dtype))


def evaluate(model, task, length, setting, seed, chunk=50):
    """Accuracy, share of strings called positive, logit spread and share of positive labels."""
    tokens, labels = make_bit_strings(setting["test_strings"], length, task, seed=10_000 + seed)
    logits = bit_string_logits(model, tokens, batch_size=chunk)  # (strings,)
    return {
        "accuracy": float(np.mean((logits > 0) == (labels > 0.5))),
        "positive_share": float(np.mean(logits > 0)),
        "logit_std": float(np.std(logits)),
        "label_share": float(np.mean(labels)),
    }


def summarise(runs):
    groups = {}
    for run_ in runs:
        groups.setdefault((run_["task"], run_["train_length"], run_["logit_scale"]), []).append(
            run_
        )
    return [
        {
            "task": task,
            "train_length": length,
            "logit_scale": scale,
            "seeds": len(group),
            "mean_test_accuracy": float(np.mean([r["test_accuracy"] for r in group])),
            "median_test_accuracy": float(np.median([r["test_accuracy"] for r in group])),
            "mean_train_length_accuracy": float(
                np.mean([r["train_length_accuracy"] for r in group])
            ),
            "seeds_at_100": sum(r["test_accuracy"] == 1.0 for r in group),
            # Calls every test string the same class: its accuracy is the label share.
            "constant_predictors": sum(r["test_positive_share"] in (0.0, 1.0) for r in group),
        }
        for (task, length, scale), group in groups.items()
    ]


def plot(summary, test_length):
    import matplotlib.pyplot as plt

    tasks = sorted({row["task"] for row in summary})
    figure, axes = plt.subplots(1, len(tasks), figsize=(4.5 * len(tasks), 3.4), squeeze=False)
    for axis, task in zip(axes[0], tasks, strict=True):
        for scale, color in zip(SCALES, ("C0", "C3"), strict=True):
            rows = [r for r in summary if r["task"] == task and r["logit_scale"] == scale]
            lengths = [r["train_length"] for r in rows]
            means = [r["mean_test_accuracy"] for r in rows]
            medians = [r["median_test_accuracy"] for r in rows]
            axis.plot(lengths, means, "o-", color=color, label=f"{scale}, mean")
            axis.plot(lengths, medians, "s:", color=color, label=f"{scale}, median")
        axis.set_title(f"{task.upper()}: accuracy at n = {test_length}")
        axis.set_xlabel("training length n")
        axis.set_ylim(0.4, 1.02)
        axis.grid(alpha=0.3)
    axes[0][0].set_ylabel("test accuracy")
    axes[0][0].legend(fontsize=8)
    return figure
