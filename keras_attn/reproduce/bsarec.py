"""BSARec vs two SASRec baselines on MovieLens-100K (Shin et al., AAAI 2024).

Three models are trained with Adam, early stopping on validation NDCG@20 and
the best weights restored, for several seeds, then tested leave-one-out with
full ranking (HR@5/10/20 and NDCG@5/10/20, mean and standard deviation, and
the paired per-seed difference of BSARec against each baseline): BSARec and
SASRec with softmax cross-entropy over all items (BSARec's official
training), and SASRec with binary cross-entropy on one sampled negative item
(the official SASRec's). The full setting first chooses BSARec's alpha and c
on validation NDCG@20 (seed 0, patience 5): alpha over `--alphas` at c = 3,
then c over `--cutoffs` at the best alpha.

Every run saves its state after every epoch in the state folder (`--state`,
by default `bsarec-state` in `--out`); the same command run again resumes
each unfinished run where it stopped and skips the finished ones, with the
same result as an uninterrupted run. Until every run is done, the results so
far are written to `bsarec-partial.json`, marked partial.
"""

import argparse
import json
import os
import pathlib
import time

import keras
import numpy as np

from keras_attn.kernels import runtime
from keras_attn.models import build_bsarec, build_sasrec
from keras_attn.recommendation import (
    evaluate_full_ranking,
    fit_recommender,
    movielens_100k_split,
)
from keras_attn.reproduce._run import (
    check_protocol,
    choose_setting,
    finish,
    mean_and_std,
    read_protocol,
    read_result,
    run_in_workers,
)
from keras_attn.utils.results import run_metadata, write_atomically, write_results
from keras_attn.utils.validation import float_option, int_option, output_folder

NAME = "bsarec"
HELP = "BSARec vs SASRec next-item recommendation on MovieLens-100K."
# The model of each name and the loss it trains with.
MODELS = {"SASRec (BCE)": "bce", "SASRec (softmax)": "softmax", "BSARec": "softmax"}
BASELINES = ("SASRec (BCE)", "SASRec (softmax)")
COLORS = {"SASRec (BCE)": "tab:olive", "SASRec (softmax)": "tab:gray", "BSARec": "tab:blue"}
METRICS = ("HR@5", "NDCG@5", "HR@10", "NDCG@10", "HR@20", "NDCG@20")
# Fast: a quick check, also the KERAS_ATTN_SMALL size (the slow test runs it with 1
# seed and 1 epoch). Full: the official protocol, many CPU-hours on 2 cores.
SETTINGS = {
    "fast": {
        "users": 200,
        "seeds": 2,
        "epochs": 2,
        "patience": 2,
        "max_sequence_length": 20,
        "search": False,
        "search_patience": 2,
    },
    "full": {
        "users": None,
        "seeds": 3,
        "epochs": 200,
        "patience": 10,
        "max_sequence_length": 50,
        "search": True,
        "search_patience": 5,
    },
}
# The official candidates of the alpha/c search.
ALPHAS = (0.1, 0.3, 0.5, 0.7, 0.9)
CUTOFFS = (1, 3, 5, 7, 9)
SEARCH_CUTOFF = 3  # c while alpha is searched
# "auto": the faster choice on CPU with the last block at the scored position
# (benchmarks/bsarec_training.py): without XLA for both models. XLA draws other
# dropout masks, so the choice is part of a run's result; a protocol's state
# folder records it for all its runs.
AUTO_JIT = {"SASRec": True, "BSARec": True}
STATE_FOLDER = "bsarec-state"
# What the summary, the plot and the search read of a finished run, besides its spec.
RESULT_KEYS = ("test", "best_epoch", "epochs_run", "valid_ndcg20", "best_valid_ndcg20", "seconds")
# The version of the models' training, recorded in a state folder's protocol so that
# runs of another version are never read back as this code's. 2: the last block
# draws its dropout masks for the scored position only. 1 (folders without the
# key): for every position, the last kept.
TRAINING_PATH = 2
# Training steps per call into the compiled step: the same steps, less time between
# them (benchmarks/bsarec_training.py); torch runs one step per call.
STEPS_PER_EXECUTION = 16


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
        "--search",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="Choose BSARec's alpha and c on validation first (full: yes, fast: no).",
    )
    parser.add_argument(
        "--search-patience", type=int_option(), help="Patience of the search runs (full 5)."
    )
    parser.add_argument(
        "--alphas",
        type=float_option(0.0, 1.0),
        nargs="+",
        default=list(ALPHAS),
        help="BSARec filter weights of the search (at c = 3).",
    )
    parser.add_argument(
        "--cutoffs",
        type=int_option(),
        nargs="+",
        default=list(CUTOFFS),
        help="BSARec c values of the search (at the best alpha).",
    )
    parser.add_argument(
        "--alpha", type=float_option(0.0, 1.0), default=0.9, help="BSARec's alpha (no search)."
    )
    parser.add_argument(
        "--cutoff", type=int_option(), default=3, help="BSARec's c, keeps c//2+1 bins (no search)."
    )
    parser.add_argument(
        "--learning-rate",
        type=float_option(0.0, low_open=True),
        default=1e-3,
        help="Adam learning rate.",
    )
    parser.add_argument("--batch-size", type=int_option(), default=256, help="Training batch size.")
    parser.add_argument(
        "--max-sequence-length",
        type=int_option(),
        help="History length (fast 20, full 50 as in the paper).",
    )
    parser.add_argument(
        "--jit-compile",
        choices=("auto", "on", "off"),
        default="auto",
        help="Train with XLA: auto (on for both models, the faster on CPU), on or off.",
    )
    parser.add_argument(
        "--workers",
        type=int_option(),
        default=1,
        help="processes that train independent runs side by side, each on one thread on TF "
        "and torch (default: 1); the results do not change.",
    )
    parser.add_argument(
        "--state",
        type=output_folder,
        help=f"Folder of the saved runs, to resume from (default: {STATE_FOLDER} in --out).",
    )


def run(args):
    started_at = time.time()
    size, setting = choose_setting(args, SETTINGS)
    config = protocol(args, setting)
    state = pathlib.Path(args.state or pathlib.Path(args.out) / STATE_FOLDER)
    check_state_folder(state, config)
    report = Report(args, size, config, started_at)
    search = None
    if config["search"]:
        search = choose_alpha_and_cutoff(config, state, args.workers, report)
    alpha, cutoff = search["chosen"] if search else (config["alpha"], config["cutoff"])
    jobs = [
        (run_spec(name, seed, alpha, cutoff, config["patience"]), config, str(state))
        for seed in range(config["seeds"])
        for name in MODELS
    ]
    done = run_in_workers(train_run, jobs, args.workers, report.add)
    runs = {name: [r for r in done if r["model"] == name] for name in MODELS}
    summary = {name: summarize(runs[name]) for name in MODELS}
    print_table(summary, config["seeds"])
    results = {
        **report.header(),
        "alpha": alpha,
        "cutoff": cutoff,
        "search": search,
        "summary": summary,
        "paired_differences": paired_differences(runs),
        "bsarec_beats": {
            baseline: {
                metric: summary["BSARec"][metric]["mean"] > summary[baseline][metric]["mean"]
                for metric in METRICS
            }
            for baseline in BASELINES
        },
        "runs": runs,
    }
    outcome = finish(args, NAME, results, plot(runs, summary), started_at=started_at, setting=size)
    report.remove()
    return outcome


def protocol(args, setting):
    """The settings every run of the reproduction shares, from `args` and `setting`."""
    return {
        "users": setting["users"],
        "seeds": args.seeds or setting["seeds"],
        "epochs": args.epochs or setting["epochs"],
        "patience": args.patience or setting["patience"],
        "max_sequence_length": args.max_sequence_length or setting["max_sequence_length"],
        "search": setting["search"] if args.search is None else args.search,
        "search_patience": args.search_patience or setting["search_patience"],
        "alphas": list(args.alphas),
        "cutoffs": list(args.cutoffs),
        "alpha": args.alpha,
        "cutoff": args.cutoff,
        "learning_rate": args.learning_rate,
        "batch_size": args.batch_size,
        "jit_compile": {name: jit_for(args, name) for name in AUTO_JIT},
        "training_path": TRAINING_PATH,
    }


def check_state_folder(state, config):
    """Creates the state folder, or checks that its runs were made with `config`."""
    path = state / "protocol.json"
    if path.is_file():
        saved = read_protocol(path)
        if saved.get("training_path", 1) != config["training_path"]:
            raise ValueError(
                f"The state folder {state} holds runs of another version of the training, "
                "whose results differ from this code's; pass a new --state folder (or empty "
                "this one) to train the protocol again. Received: training_path="
                f"{config['training_path']!r}, the folder's {saved.get('training_path', 1)!r}"
            )
    check_protocol(state, config)


def jit_for(args, name):
    """Whether model `name` ("SASRec" or "BSARec") trains under XLA, from `--jit-compile`."""
    return AUTO_JIT[name] if args.jit_compile == "auto" else args.jit_compile == "on"


def run_spec(model, seed, alpha, cutoff, patience, stage="test"):
    """What one run trains; its `name` names its files in the state folder."""
    name = f"{stage}-{model.replace(' ', '').replace('(', '-').replace(')', '')}-seed{seed}"
    if model == "BSARec":
        name += f"-alpha{alpha}-c{cutoff}"
    return {
        "name": name,
        "stage": stage,
        "model": model,
        "seed": seed,
        "alpha": alpha if model == "BSARec" else None,
        "cutoff": cutoff if model == "BSARec" else None,
        "patience": patience,
    }


def train_run(spec, config, state):
    """Trains and tests one run, resuming its saved state; a finished run is read back."""
    state = pathlib.Path(state)
    done = state / f"{spec['name']}.json"
    finished = read_finished_run(done, spec)
    if finished is not None:
        return finished
    load_at_start = [round(value, 2) for value in os.getloadavg()]
    split, num_items = movielens_100k_split(config["max_sequence_length"], config["users"])
    keras.utils.set_random_seed(spec["seed"])
    model = build_model(spec, num_items, config["max_sequence_length"])
    family = "BSARec" if spec["model"] == "BSARec" else "SASRec"
    fitted = fit_recommender(
        model,
        split,
        num_items=num_items,
        loss=MODELS[spec["model"]],
        epochs=config["epochs"],
        patience=spec["patience"],
        learning_rate=config["learning_rate"],
        batch_size=config["batch_size"],
        seed=spec["seed"],
        jit_compile=config["jit_compile"][family],
        steps_per_execution=1 if keras.backend.backend() == "torch" else STEPS_PER_EXECUTION,
        state_path=state / f"{spec['name']}.npz",
    )
    check_converged(fitted, config["learning_rate"])
    test = evaluate_full_ranking(model, split.test_inputs, split.test_targets, split.test_seen)
    result = {
        **spec,
        "test": test,
        "best_epoch": fitted["best_epoch"],
        "epochs_run": fitted["epochs_run"],
        "valid_ndcg20": [metrics["NDCG@20"] for metrics in fitted["valid"]],
        "best_valid_ndcg20": max(metrics["NDCG@20"] for metrics in fitted["valid"]),
        "train_loss": fitted["train_loss"],
        "seconds": fitted["seconds"],
        # Training and validation together, per training sequence.
        "sequences_per_s": fitted["epochs_run"] * len(split.train_targets) / fitted["seconds"],
        "load_average_at_start": load_at_start,
        # Where it trained: a search run may run on a GPU.
        "devices": training_devices(),
        "backend": keras.backend.backend(),
        "train_samples": len(split.train_targets),
    }
    text = json.dumps(result, indent=1)
    write_atomically(done, lambda file: file.write(text.encode()))
    (state / f"{spec['name']}.npz").unlink(missing_ok=True)
    print(
        f"{spec['name']}: best epoch {result['best_epoch']}/{result['epochs_run']}, "
        f"{result['seconds']:.0f} s, " + ", ".join(f"{m} {result['test'][m]:.4f}" for m in METRICS),
        flush=True,
    )
    return result


def read_finished_run(path, spec):
    """The result of the run `spec` saved at `path`; `None` when there is none.

    A file that does not hold the run's result (truncated, empty, another
    run's) is set aside (`keras_attn.utils.results.set_aside`), and the run
    trains again.
    """
    return read_result(path, spec, _missing)


def _missing(result):
    """What a finished run's result holds and `result` lacks."""
    test = result.get("test")
    missing = [key for key in RESULT_KEYS if key not in result]
    return missing + [f"test.{m}" for m in METRICS if not isinstance(test, dict) or m not in test]


def training_devices():
    """The devices Keras trains on, as `keras.distribution.list_devices` names them.

    Keras's distribution API lists no devices on torch, so there they are
    torch's: its GPUs, else the CPU.
    """
    return runtime.training_devices()


def check_converged(fitted, learning_rate):
    """Raises when every validation epoch of a `fit_recommender` run had non-finite scores."""
    if fitted["best_epoch"] is None:
        raise ValueError(
            "Training diverged: every validation epoch gave non-finite scores. Try a lower "
            f"learning rate. Received: learning_rate={learning_rate!r}"
        )


def build_model(spec, num_items, max_sequence_length):
    if spec["model"] == "BSARec":
        return build_bsarec(
            num_items,
            max_sequence_length,
            alpha=spec["alpha"],
            cutoff=spec["cutoff"],
            seed=spec["seed"],
        )
    return build_sasrec(num_items, max_sequence_length, seed=spec["seed"])


def choose_alpha_and_cutoff(config, state, workers, report):
    """BSARec's alpha, then c, with the best validation NDCG@20 (seed 0, search patience)."""

    def stage(pairs):
        jobs = [
            (run_spec("BSARec", 0, a, c, config["search_patience"], "search"), config, str(state))
            for a, c in pairs
        ]
        return run_in_workers(train_run, jobs, workers, report.add)

    by_alpha = stage([(alpha, SEARCH_CUTOFF) for alpha in config["alphas"]])
    best_alpha = max(by_alpha, key=lambda r: r["best_valid_ndcg20"])["alpha"]
    by_cutoff = stage([(best_alpha, cutoff) for cutoff in config["cutoffs"]])
    best_cutoff = max(by_cutoff, key=lambda r: r["best_valid_ndcg20"])["cutoff"]
    candidates = [
        {key: r[key] for key in ("alpha", "cutoff", "best_valid_ndcg20", "epochs_run")}
        for r in by_alpha + by_cutoff
    ]
    print(f"search: alpha {best_alpha}, c {best_cutoff}", flush=True)
    return {"candidates": candidates, "chosen": [best_alpha, best_cutoff]}


class Report:
    """The results so far, written to `bsarec-partial.json` as each run finishes."""

    def __init__(self, args, size, config, started_at):
        self.args, self.size, self.config, self.started_at = args, size, config, started_at
        self.load_at_start = [round(value, 2) for value in os.getloadavg()]
        self.finished = []
        split, self.num_items = movielens_100k_split(config["max_sequence_length"], config["users"])
        self.num_users, self.train_samples = len(split.test_targets), len(split.train_targets)

    def header(self):
        return {
            "setting": self.size,
            "users": self.num_users,
            "items": self.num_items,
            "train_samples": self.train_samples,
            **{key: value for key, value in self.config.items() if key != "users"},
            "max_epochs": self.config["epochs"],
            "load_average_at_start": self.load_at_start,
            "train_seconds_all_runs": sum(r["seconds"] for r in self.finished),
        }

    def add(self, result):
        # The search's c = 3 run at the best alpha is one of the alpha runs: counted once.
        if any(run["name"] == result["name"] for run in self.finished):
            return
        self.finished.append(result)
        results = {**self.header(), "partial": True, "finished_runs": self.finished}
        setting = "fast" if self.size == "small" else self.size
        results["meta"] = run_metadata(self.started_at, setting)
        write_results(self.args.out, f"{NAME}-partial", results)

    def remove(self):
        (pathlib.Path(self.args.out) / f"{NAME}-partial.json").unlink(missing_ok=True)


def summarize(runs):
    """Mean and sample standard deviation over seeds of each test metric and the epochs."""
    summary = {metric: mean_and_std([run["test"][metric] for run in runs]) for metric in METRICS}
    summary["best_epoch"] = [run["best_epoch"] for run in runs]
    summary["epochs_run"] = [run["epochs_run"] for run in runs]
    summary["seconds"] = sum(run["seconds"] for run in runs)
    return summary


def paired_differences(runs):
    """BSARec minus each baseline, seed by seed, per metric, with their mean and std."""
    differences = {}
    for baseline in BASELINES:
        table = {}
        for metric in METRICS:
            values = [
                ours["test"][metric] - theirs["test"][metric]
                for ours, theirs in zip(runs["BSARec"], runs[baseline], strict=True)
            ]
            table[metric] = {"per_seed": values, **mean_and_std(values)}
        differences[baseline] = table
    return differences


def print_table(summary, seeds):
    print(f"\nTest, full ranking, mean ± std over {seeds} seeds")
    print(f"{'model':<18}" + "".join(f"{m:>18}" for m in METRICS))
    for name, table in summary.items():
        cells = "".join(f"{table[m]['mean']:>10.4f} ± {table[m]['std']:.4f}" for m in METRICS)
        print(f"{name:<18}{cells}")


def plot(runs, summary):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, bars) = plt.subplots(1, 2, figsize=(10, 3.5))
    positions = np.arange(len(METRICS))
    for offset, name in zip((-0.27, 0.0, 0.27), MODELS, strict=True):
        color = COLORS[name]
        for index, result in enumerate(runs[name]):
            epochs = np.arange(1, len(result["valid_ndcg20"]) + 1)
            label = name if index == 0 else None
            curves.plot(epochs, result["valid_ndcg20"], color=color, alpha=0.7, label=label)
        means = [summary[name][m]["mean"] for m in METRICS]
        stds = [summary[name][m]["std"] for m in METRICS]
        bars.bar(positions + offset, means, 0.27, yerr=stds, color=color, label=name)
    curves.set(xlabel="epoch", ylabel="validation NDCG@20", title="Early stopping signal")
    curves.legend()
    bars.set_xticks(positions, METRICS, rotation=30)
    bars.set(title="Test (MovieLens-100K, full ranking)")
    bars.legend()
    figure.tight_layout()
    return figure
