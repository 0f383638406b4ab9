"""The docs tables that `docs_tables` generates, each from result files.

Each entry of `TABLES` maps a table name (used in a page's
`<!-- results:table NAME -->` marker) to a function of a `Results` reader
that returns the markdown table.
"""

import functools
import html
import pathlib
import statistics

from keras_attn.reproduce import REPRODUCTIONS
from keras_attn.reproduce import adavit_converged as adavit_converged_run
from keras_attn.utils.validation import renamed_config
from tools.docs_tables import ROOT, markdown_table

LOGSPARSE_MODELS = {
    "seasonal_naive": "seasonal naive (previous day)",
    "full_k1": "full attention, `k = 1`",
    "full_conv": "full attention + conv, `k = 9`",
    "logsparse_k1": "LogSparse (local), `k = 1`",
    "logsparse_conv": "LogSparse (local) + conv, `k = 9`",
}
INITS = ("default", "mimetic")
PARITY_SCALES = {"none": "plain", "log_length": "log-length scaled"}


LOGSPARSE_DECODERS = {"mean_path": "mean path", "sample_paths": "sample paths"}


def _result_table(build):
    """Turns `build(result, *args)` into `spec(stem, *args)`, the table of `results/STEM.json`."""

    @functools.wraps(build)
    def spec(stem, *args):
        return lambda results: build(results(stem), *args)

    return spec


@_result_table
def logsparse(result):
    """Same-window comparison: every model's R0.5/R0.9 with both decoders."""
    data = result["results"]
    datasets = list(data)
    header = ["model", "decoder"] + [f"{d} {m}" for d in datasets for m in ("R0.5", "R0.9")]
    first = data[datasets[0]]["same_window"]
    rows = []
    for name in (name for name in LOGSPARSE_MODELS if name in first):
        for decoder, label in LOGSPARSE_DECODERS.items():
            if name == "seasonal_naive" and decoder == "sample_paths":
                continue
            cells = [
                f"{data[d]['same_window'][name][decoder][m]:.4f}"
                for d in datasets
                for m in ("R0.5", "R0.9")
            ]
            point = name == "seasonal_naive"  # a point forecast: one row, no decoder
            rows.append([LOGSPARSE_MODELS[name], "–" if point else label, *cells])
    return markdown_table(header, rows)


@_result_table
def logsparse_budget(data):
    """Memory-budget comparison: window, planned memory and mean ± std over seeds."""
    budget = data["memory_budget"]
    header = ["model", "window (steps)", "planned attention MiB", "decoder", "seeds"]
    datasets = list(data["results"])
    header += [f"{d} {m}" for d in datasets for m in ("R0.5", "R0.9")]
    rows = []
    for name, chosen in budget["models"].items():
        for decoder, label in LOGSPARSE_DECODERS.items():
            parts = [data["results"][d]["budget"][name] for d in datasets]
            cells = [_mean_std(part[decoder][m]) for part in parts for m in ("R0.5", "R0.9")]
            rows.append(
                [
                    LOGSPARSE_MODELS[name],
                    chosen["window"],
                    f"{chosen['planned_bytes'] / 2**20:.1f}",
                    label,
                    len(parts[0]["runs"]),
                    *cells,
                ]
            )
    return markdown_table(header, rows)


@_result_table
def logsparse_budget_paired(data):
    """LogSparse − full attention under the same memory budget, paired by seed."""
    rows = []
    for dataset, parts in data["results"].items():
        logsparse, full = parts["budget"]["logsparse_conv"], parts["budget"]["full_conv"]
        for decoder, label in LOGSPARSE_DECODERS.items():
            for metric in ("R0.5", "R0.9"):
                differences = [
                    sparse[decoder][metric] - dense[decoder][metric]
                    for sparse, dense in zip(logsparse["runs"], full["runs"], strict=True)
                ]
                per_seed = ", ".join(f"{d:+.3f}" for d in differences)
                mean_std = _mean_std(differences, digits=3, sign="+")
                rows.append([dataset, label, metric, per_seed, mean_std])
    header = ["series", "decoder", "metric", "per seed", "mean ± std"]
    return markdown_table(header, rows)


@_result_table
def parity(data):
    test_length = data["setting"]["test_length"]
    header = [
        "task",
        "train n",
        "attention",
        "seeds",
        f"mean acc (n={test_length})",
        f"median acc (n={test_length})",
        "mean acc at train n",
        f"seeds ≥ 0.99 at n={test_length}",
    ]
    rows = []
    for row in data["summary"]:
        runs = [
            run
            for run in data["runs"]
            if (run["task"], run["train_length"], run["logit_scale"])
            == (row["task"], row["train_length"], row["logit_scale"])
        ]
        solved = sum(run["test_accuracy"] >= 0.99 for run in runs)
        rows.append(
            [
                row["task"].upper(),
                row["train_length"],
                PARITY_SCALES[row["logit_scale"]],
                row["seeds"],
                f"{row['mean_test_accuracy']:.3f}",
                f"{row['median_test_accuracy']:.3f}",
                f"{row['mean_train_length_accuracy']:.3f}",
                f"{solved}/{row['seeds']}",
            ]
        )
    return markdown_table(header, rows)


@_result_table
def parity_runs(data, task):
    """Every run of one task: accuracy, share called positive, logit spread, label share."""
    header = [
        "seed",
        "attention",
        f"test acc (n={data['setting']['test_length']})",
        "share called positive",
        "logit std",
        "share of positive labels",
        "train-length acc",
    ]
    rows = [
        [
            run["seed"],
            PARITY_SCALES[run["logit_scale"]],
            f"{run['test_accuracy']:.2f}",
            f"{run['test_positive_share']:.2f}",
            f"{run['test_logit_std']:.4f}",
            f"{run['test_label_share']:.2f}",
            f"{run['train_length_accuracy']:.2f}",
        ]
        for run in sorted(data["runs"], key=lambda run: run["seed"])
        if run["task"] == task
    ]
    return markdown_table(header, rows)


@_result_table
def mimetic(data):
    """One row per experiment: final test accuracy per init and the paired difference."""
    header = [
        "training images",
        "positions",
        "default init",
        "mimetic init",
        "mimetic − default (paired)",
        "per seed",
    ]
    rows = []
    for experiment in data["experiments"]:
        summary = experiment["summary"]
        difference = summary["difference"]
        rows.append(
            [
                f"{experiment['train_size']:,}",
                experiment["position_embedding"],
                *(_mean_std(summary[i]) for i in INITS),
                f"**{_mean_std(difference, sign='+')}**",
                ", ".join(f"{value:+.3f}" for value in difference["per_seed"]),
            ]
        )
    return markdown_table(header, rows)


@_result_table
def t2t(data):
    """Per comparison: each model's size and final test accuracy, and the paired difference."""

    def label(sizes):
        # Files written before the argument rename say `embed_dim` and `depth`.
        sizes = renamed_config(sizes, {"embed_dim": "hidden_dim", "depth": "num_layers"})
        patch = sizes.get("patch_size")
        tokenizer = "T2T module" if sizes["tokenizer"] == "t2t" else f"{patch}×{patch} patches"
        blocks = f"{sizes['num_layers']} blocks of {sizes['num_heads']} heads"
        return f"{tokenizer}, width {sizes['hidden_dim']}, {blocks}"

    header = [
        "model",
        "parameters",
        "MACs",
        "test accuracy, mean ± std",
        "per seed",
        "paired difference, mean ± std (per seed)",
    ]
    rows = []
    for comparison, names in data["comparisons"].items():
        difference = data["summary"]["differences"][comparison]
        paired = (
            f"**{_mean_std(difference, sign='+')}** "
            f"({', '.join(f'{value:+.3f}' for value in difference['per_seed'])})"
        )
        for name in names:
            sizes, summary = data["models"][name], data["summary"][name]
            finals = [run["final_test_accuracy"] for run in data["runs"][name]]
            rows.append(
                [
                    label(sizes),
                    f"{sizes['parameters']:,}",
                    f"{sizes['macs'] / 1e6:.1f}M",
                    _mean_std(summary),
                    ", ".join(f"{value:.4f}" for value in finals),
                    paired if name == names[0] else "",
                ]
            )
    return markdown_table(header, rows)


BSAREC_METRICS = ("HR@5", "NDCG@5", "HR@10", "NDCG@10", "HR@20", "NDCG@20")


@_result_table
def bsarec(data):
    """Test metrics, mean ± std over seeds, of every model of a BSARec result file."""
    rows = []
    for name, summary in data["summary"].items():
        label = f"{name} (α = {data['alpha']}, c = {data['cutoff']})"
        row = [label if name == "BSARec" else name]
        row += [_mean_std(summary[m]) for m in BSAREC_METRICS]
        if "epochs_run" in summary:  # the files of the three-model protocol
            row.append(", ".join(map(str, summary["epochs_run"])))
        rows.append(row)
    header = ["model", *BSAREC_METRICS]
    if len(rows[0]) > len(header):
        header.append("epochs run per seed")
    return markdown_table(header, rows)


@_result_table
def bsarec_differences(data):
    """BSARec minus each SASRec baseline, per seed, with mean ± std."""
    rows = [
        [f"BSARec − {baseline}"]
        + [
            _mean_std(table[m], sign="+")
            + " ("
            + ", ".join(f"{v:+.4f}" for v in table[m]["per_seed"])
            + ")"
            for m in BSAREC_METRICS
        ]
        for baseline, table in data["paired_differences"].items()
    ]
    return markdown_table(["difference (per seed)", *BSAREC_METRICS], rows)


@_result_table
def bsarec_search(data):
    """The α and c candidates of BSARec's search, by stage, the chosen pair in bold.

    The run at c = 3 and the best α belongs to both stages; it is listed once.
    """
    chosen = data["search"]["chosen"]
    rows, seen = [], set()
    for run in data["search"]["candidates"]:
        if (run["alpha"], run["cutoff"]) in seen:
            continue
        seen.add((run["alpha"], run["cutoff"]))
        cells = [run["alpha"], run["cutoff"], f"{run['best_valid_ndcg20']:.4f}", run["epochs_run"]]
        bold = [run["alpha"], run["cutoff"]] == chosen
        rows.append([f"**{cell}**" if bold else cell for cell in cells])
    return markdown_table(["α", "c", "best validation NDCG@20", "epochs run"], rows)


def _benchmark_rows(name, header):
    """Turns `cells(row)` into the table of `results/benchmarks/NAME.json`, a row per result."""

    def decorate(cells):
        @functools.wraps(cells)
        def table(results):
            rows = results(f"benchmarks/{name}")["results"]["rows"]
            return markdown_table(header, [cells(row) for row in rows])

        return table

    return decorate


@_benchmark_rows("fourier_filter", ["L", "attention (ms)", "filter (ms)", "filter / attention"])
def fourier_filter(row):
    return [
        row["length"],
        f"{row['attention_ms']:.2f}",
        f"{row['filter_ms']:.2f}",
        f"{row['ratio']:.3f}",
    ]


def ffn_memories_benchmark(results):
    data = results("benchmarks/ffn_memories")["results"]
    rows = [
        ["forward passes alone (baseline)", f"{data['forward_s']:.1f}", "1.00"],
        ["analyze_memories", f"{data['analysis_s']:.1f}", f"{data['ratio']:.2f}"],
    ]
    return markdown_table(["work", "seconds", "ratio to the forward passes"], rows)


def t2t_benchmark(results):
    data = results("benchmarks/t2t_vit")["results"]
    batch = data["batch"]
    rows = [
        [mode, f"{data[key]:.0f}", f"{batch / data[key] * 1e3:.1f}"]
        for mode, key in (("eager", "eager_ms"), ("XLA", "xla_ms"))
    ]
    return markdown_table(["mode", f"ms / batch of {batch}", "images / s"], rows)


@_result_table
def ffn_memories(data):
    """Per layer: each rate with its 95% interval, and the shuffled-key null."""
    columns = {
        "agreement_rate": "Agreement",
        "official_agreement_rate": "Agreement (official)",
        "shuffled_agreement_rate": "Shuffled keys (null)",
        "agreement_p_value": "p (agreement ≤ null)",
        "next_token_rank": "Next-token rank",
        "shuffled_next_token_rank": "Rank, shuffled keys",
        "active_fraction": "Active memories",
        "zero_agreement_rate": "Zero agreement",
        "official_zero_agreement_rate": "Zero agreement (official)",
        "memory_sum_zero_agreement_rate": "Zero agreement (memory sum)",
        "residual_kept": "Residual kept",
        "ffn_override": "FFN override",
        "compromise": "Compromise",
    }

    def cell(data, key, layer):
        value = data[key][layer]
        if key == "agreement_p_value":
            return f"{value:.3f}"
        shown = f"{value:.0f}" if "rank" in key else f"{value:.1%}"
        interval = data.get("intervals", {}).get(key)
        if interval is None:
            return shown
        low, high = interval[layer]
        return shown + (
            f" [{low:.0f}, {high:.0f}]" if "rank" in key else f" [{low:.1%}, {high:.1%}]"
        )

    keys = [key for key in columns if key in data]
    rows = [
        [layer + 1] + [cell(data, key, layer) for key in keys]
        for layer in range(len(data["layers"]))
    ]
    return markdown_table(["Layer", *(columns[key] for key in keys)], rows)


def pending_until(stem, command, table):
    """`table`, or a sentence saying the run is pending while `results/STEM.json` is missing."""

    def render(results):
        if results.exists(stem):
            return table(results)
        return (
            f"**Pending.** `results/{stem}.json` is not committed yet, so no numbers are "
            f"stated here: run `{command}`, commit its JSON as `results/{stem}.json` and "
            "regenerate the docs."
        )

    return render


def _target(case, speedup=1.5, points=1.0):
    met = case["speedup"] >= speedup and case["accuracy_change_points"] >= -points
    return "met" if met else "**not met**"


def adavit_benchmark(results):
    """Every case of the benchmark: accuracy, latency ratio, its bounds and MAC ratio."""
    header = [
        "patches",
        "batch",
        "policy",
        "usage (patch / head / attention / MLP)",
        "accuracy, full → fast path",
        "latency full / fast path / ungated part (ms)",
        "latency ratio",
        "ideal ratio at these MACs",
        "ceiling",
        "MAC ratio",
        "≥ 1.5× at ≤ 1 point loss",
    ]
    rows = [
        [
            case["patches"],
            case["batch"],
            case["policy"],
            _usage(case["usage"]),
            f"{case['full_accuracy']:.4f} → {case['fast_accuracy']:.4f} "
            f"({case['accuracy_change_points']:+.2f})",
            f"{case['full_ms']:.2f} / {case['fast_ms']:.2f} / {case['ungated_ms']:.2f}",
            f"**{case['speedup']:.2f}×**",
            f"{case['ideal_speedup']:.2f}×",
            f"{case['ceiling_speedup']:.2f}×",
            f"{case['mac_ratio']:.2f}×",
            _target(case),
        ]
        for case in results("benchmarks/adavit")["results"]["cases"]
    ]
    return markdown_table(header, rows)


# The paper-scale runs of `benchmarks/adavit.py --paper-scale`: one file per
# backend and fast-path configuration, in the order of the table.
PAPER_BACKBONE_NAMES = {"deit_s": "DeiT-S", "t2t_vit_19": "T2T-ViT-19"}
ADAVIT_PAPER_SCALE_RUNS = {
    "adavit_paper_scale_tensorflow_every_head": ("TF + XLA", "1 (every head, masked)"),
    "adavit_paper_scale_jax_every_head": ("JAX", "1 (every head, masked)"),
    "adavit_paper_scale_tensorflow": ("TF + XLA", "default (kernels gathered)"),
    "adavit_paper_scale_jax": ("JAX", "default (kernels gathered)"),
    "adavit_paper_scale_torch_every_head": ("torch (eager)", "1 (every head, masked)"),
    "adavit_paper_scale_torch": ("torch (eager)", "default (kernels gathered)"),
}


def adavit_paper_scale(results):
    """Per backend, fast-path head buckets, backbone and batch: ratios and first-call time."""
    header = [
        "backend",
        "head buckets",
        "backbone",
        "batch",
        "imposed: measured (ideal, MACs)",
        "random: measured (ideal, MACs)",
        "first call, full / fast path (s)",
        "≥ 1.6× (imposed)",
        "batch 1, imposed: of the computed-MACs ideal (≥ 85%)",
    ]
    present = set(results.stems())
    rows = []
    for stem, (backend, buckets) in ADAVIT_PAPER_SCALE_RUNS.items():
        if f"benchmarks/{stem}" not in present:
            continue
        cases = results(f"benchmarks/{stem}")["results"]["cases"]
        by_key = {(c["backbone"], c["batch"], c["policy"]): c for c in cases}
        for backbone, batch in dict.fromkeys((c["backbone"], c["batch"]) for c in cases):
            imposed, random = (by_key[backbone, batch, p] for p in ("imposed", "random"))
            first = imposed["first_call_s"]
            rows.append(
                [
                    backend,
                    buckets,
                    PAPER_BACKBONE_NAMES[backbone],
                    batch,
                    _ratios(imposed),
                    _ratios(random),
                    f"{first['full']:.0f} / {first['fast']:.0f}",
                    f"{'met' if imposed['speedup'] >= 1.6 else '**not met**'} "
                    f"({imposed['speedup']:.3f}×)",
                    _of_computed_ideal(imposed),
                ]
            )
    return markdown_table(header, rows)


def _of_computed_ideal(case):
    """The batch-1 verdict: the measured ratio over the ideal one at the computed MACs."""
    if case["batch"] != 1:
        return "—"
    if "of_computed_ideal" not in case:
        return "not measured (a run before `computed_macs`)"
    share = case["of_computed_ideal"]
    verdict = "met" if share >= 0.85 else "**not met**"
    return f"{verdict}: {share:.0%} of {case['computed_ideal_speedup']:.2f}×"


def _ratios(case):
    """`measured (ideal, MACs)` full / fast-path ratios of a case."""
    return f"**{case['speedup']:.2f}×** ({case['ideal_speedup']:.2f}×, {case['mac_ratio']:.2f}×)"


def _usage(usage):
    return " / ".join(f"{usage[key]:.2f}" for key in ("patches", "heads", "attention", "mlp"))


def _mean_std(entry, scale=1.0, digits=4, sign=""):
    """`mean ± std` of a `{"mean", "std"}` summary, or of a list of per-seed values."""
    if not isinstance(entry, dict):
        entry = {"mean": statistics.mean(entry), "std": statistics.stdev(entry)}
    return f"{entry['mean'] * scale:{sign}.{digits}f} ± {entry['std'] * scale:.{digits}f}"


@_result_table
def adavit(data):
    """The full ViT and, per γ, both policies: accuracy, MACs and latency over seeds."""
    summary, batch = data["summary"], data["setting"]["latency_batch"]
    full = summary["full"]
    header = [
        "model",
        "usage (patch / head / attention / MLP)",
        "test accuracy",
        "MMACs / image",
        f"ms / batch of {batch}",
        "MAC ratio",
        "latency ratio",
    ]

    def row(name, entry, usage):
        return [
            name,
            usage,
            _mean_std(entry["accuracy"]),
            _mean_std(entry["macs"], 1e-6, 2),
            _mean_std(entry["latency_ms"], digits=2),
            f"{full['macs']['mean'] / entry['macs']['mean']:.2f}×",
            f"{full['latency_ms']['mean'] / entry['latency_ms']['mean']:.2f}×",
        ]

    rows = [row("full ViT (same training budget)", full, "1 / 1 / 1 / 1")]
    for entry in summary["adavit"]:
        for policy in ("learned", "random"):
            name = f"AdaViT γ={entry['gamma']}, {policy} policy"
            rows.append(row(name, entry[policy], _usage(entry[policy]["usage"])))
    return markdown_table(header, rows)


# The AdaViT ablation's runs: `results/adavit-ablation/NAME.json`, one official
# option set to the former behaviour (or none).
ADAVIT_ABLATION = {
    "none": "official defaults",
    "gate_first_block": "first block ungated (`gate_first_block=False`)",
    "head_gates_mlp_input": "off heads keep their MLP inputs (`head_gates_mlp_input=False`)",
    "gated_drop_path": "drop path in gated blocks (`gated_drop_path=True`)",
}


def adavit_ablation(results):
    """Per run of the ablation: the full ViT and, per γ, the learned and random accuracy."""
    present = set(results.stems())
    rows = []
    for name, label in ADAVIT_ABLATION.items():
        if f"adavit-ablation/{name}" not in present:
            continue
        summary = results(f"adavit-ablation/{name}")["summary"]
        cells = [label, _mean_std(summary["full"]["accuracy"], digits=3)]
        for entry in summary["adavit"]:
            learned, random = entry["learned"], entry["random"]
            cells.append(f"{_mean_std(learned['accuracy'], digits=3)} ({_usage(learned['usage'])})")
            cells.append(_mean_std(random["accuracy"], digits=3))
        rows.append(cells)
    gammas = [e["gamma"] for e in results("adavit-ablation/none")["summary"]["adavit"]]
    header = ["AdaViT options", "full ViT"]
    for gamma in gammas:
        header += [f"γ={gamma} learned (usage)", f"γ={gamma} random"]
    return markdown_table(header, rows)


# The converged AdaViT run's models per γ, in table order: (summary key, label).
ADAVIT_CONVERGED_MODELS = (
    ("learned", "learned policy"),
    ("random", "random, same mean usage"),
    ("random_like", "random, learned rate per block"),
    ("learned_tempered", "learned policy, tempered inference"),
    ("random_tempered", "random, tempered mean usage"),
    ("random_like_tempered", "random, tempered rate per block"),
    ("dense", "dense ViT of equal MACs"),
)
ADAVIT_CONVERGED_COMMAND = (
    "keras-attn reproduce adavit-converged --full --workers 2 --out runs/adavit-converged "
    "--state run-state/adavit-converged --backbone run-state/adavit-converged-backbone"
)


def _points(difference):
    """`mean ± std` points of a paired difference in accuracy, with its per-seed signs."""
    wins = sum(value > 0 for value in difference["per_seed"])
    return f"{_mean_std(difference, 100, 2, '+')} ({wins}/{len(difference['per_seed'])} seeds > 0)"


@_result_table
def adavit_converged(data):
    """Per γ and model: test accuracy, change against the backbone, MACs and fast-path latency."""
    summary = data["summary"]
    full = summary["full"]
    batches = data["latency"]["batches"]
    header = ["γ", "model", "test accuracy", "vs backbone (points)", "MMACs / image"]
    header += ["fewer MACs", *(f"ms / batch of {batch}" for batch in batches)]
    header += ["usage (patch / head / attention / MLP)"]

    def row(gamma, label, entry):
        change = 100 * (entry["accuracy"]["mean"] - full["accuracy"]["mean"])
        latency = [_mean_std(entry["latency_ms"][str(batch)], digits=2) for batch in batches]
        usage = _usage(entry["usage"]) if "usage" in entry else "—"
        ratio = full["macs"]["mean"] / entry["macs"]["mean"]
        macs = _mean_std(entry["macs"], 1e-6, 3)
        accuracy = _mean_std(entry["accuracy"])
        return [gamma, label, accuracy, f"{change:+.2f}", macs, f"{ratio:.1f}×", *latency, usage]

    rows = [row("—", "backbone (full ViT)", full)]
    rows[0][2] = f"{full['accuracy']['mean']:.4f}"  # one backbone, no spread
    for entry in summary["adavit"]:
        rows += [row(entry["gamma"], label, entry[key]) for key, label in ADAVIT_CONVERGED_MODELS]
    return markdown_table(header, rows)


@_result_table
def adavit_converged_claims(data):
    """Per γ, the paired differences that the paper's claims rest on, beside the paper's."""
    full = data["summary"]["full"]
    header = ["model", "fewer MACs", "vs backbone (points)", "learned − random (points)"]
    header += ["learned − random, rate per block", "learned − dense ViT of equal MACs"]
    rows = [
        [f"paper: {name}", f"{1 / mac_ratio:.1f}×", f"{change:+.1f}", "—", "—", "—"]
        for name, mac_ratio, change in adavit_converged_run.PAPER_POINTS
    ]
    for entry in data["summary"]["adavit"]:
        for learned, label in (("learned", "official"), ("learned_tempered", "tempered")):
            ratio = full["macs"]["mean"] / entry[learned]["macs"]["mean"]
            rows.append(
                [
                    f"ours: γ={entry['gamma']}, {label} inference",
                    f"{ratio:.1f}×",
                    _mean_std(entry[f"{learned}_minus_full"], 100, 2, "+"),
                    _points(entry[f"{learned}_minus_random"]),
                    _points(entry[f"{learned}_minus_random_like"]),
                    _points(entry[f"{learned}_minus_dense"]),
                ]
            )
    return markdown_table(header, rows)


TOPIC_CONFIGURATIONS = {"joint": "joint (all trained)", "official": "official (frozen)"}


@_result_table
def adavit_paired(result):
    """Per γ, accuracy differences paired by seed: learned − random and learned − full ViT."""
    runs = result["runs"]
    rows = []
    for index, entry in enumerate(runs[0]["adavit"]):
        models = [run["adavit"][index] for run in runs]
        versus_random = [100 * (m["learned"]["accuracy"] - m["random"]["accuracy"]) for m in models]
        versus_full = [
            100 * (m["learned"]["accuracy"] - run["full"]["accuracy"])
            for m, run in zip(models, runs, strict=True)
        ]
        rows.append(
            [
                f"γ={entry['gamma']}",
                ", ".join(f"{value:+.2f}" for value in versus_random),
                _mean_std(versus_random, digits=2, sign="+"),
                f"{sum(value > 0 for value in versus_random)}/{len(runs)}",
                _mean_std(versus_full, digits=2, sign="+"),
            ]
        )
    header = ["AdaViT", "learned − random per seed (points)", "mean ± std"]
    return markdown_table(header + ["seeds learned > random", "learned − full ViT"], rows)


@_result_table
def topics_end_state(result):
    synthetic = result["synthetic"]
    rows = []
    for configuration, label in TOPIC_CONFIGURATIONS.items():
        summary = synthetic[configuration]
        finals = summary["final_curves"]
        holds = summary["end_state_holds"]
        rows.append(
            [
                label,
                summary["steps"][-1],
                _mean_std(finals["value_block_gap"], digits=2),
                _mean_std(finals["attention_same_over_uniform"], digits=3),
                _mean_std(finals["attention_different_over_uniform"], digits=3),
                _mean_std(finals["embedding_gap"], digits=3),
                f"{sum(holds)} / {len(holds)}",
            ]
        )
    header = ["Configuration", "Steps", "Value block gap", "Same-topic attention × n"]
    header += ["Different-topic attention × n", "Embedding gap", "Same > 1/n > different"]
    return markdown_table(header, rows)


@_result_table
def topics_take_off(result):
    labels = {
        "value_block_gap": "value block gap (`E W_v W_o D`)",
        "embedding_gap": "embedding inner-product gap",
        "attention_gap": "attention gap ((same − different) × n)",
    }
    synthetic = result["synthetic"]
    rows = []
    for configuration, label in TOPIC_CONFIGURATIONS.items():
        for key, take_off in synthetic[configuration]["take_off_step"].items():
            per_seed = ", ".join(str(step) for step in take_off["per_seed"])
            rows.append([label, labels[key], _mean_std(take_off, digits=1), per_seed])
    return markdown_table(["Configuration", "Statistic", "Step (mean ± std)", "Per seed"], rows)


@_result_table
def topics_minilm(result):
    layers = result["minilm"]["attention_per_layer"]
    rows = [
        [
            layer + 1,
            f"{row['same_topic']:.4f}",
            f"{row['uniform']:.4f}",
            f"{row['different_topic']:.4f}",
            f"{row['same_topic'] / row['different_topic']:.1f}×",
        ]
        for layer, row in enumerate(layers)
    ]
    header = ["Layer", "Same-topic attention", "`1/n`", "Different-topic attention"]
    return markdown_table(header + ["Same / different"], rows)


def _accuracy_with_interval(value, interval, signed=False):
    sign = "+" if signed else ""
    low, high = interval
    return f"{value:{sign}.3f} [{low:{sign}.3f}, {high:{sign}.3f}]"


@_result_table
def heads_curves(data):
    orders = {
        "importance": "least important first",
        "importance_reestimated": "re-estimated",
        "random_mean": "random (mean of orders)",
        "reverse": "most important first",
    }
    shown = [name for name in orders if name in data["accuracy"]]
    difference = data["importance_minus_random"]
    rows = []
    for index, fraction in enumerate(data["fractions"]):
        row = [f"{100 * fraction:.0f}%"]
        for name in shown:
            accuracy = data["accuracy"][name][index]
            row.append(_accuracy_with_interval(accuracy, data["accuracy_interval"][name][index]))
        row.append(
            _accuracy_with_interval(
                difference["accuracy"][index], difference["interval"][index], signed=True
            )
        )
        rows.append(row)
    header = ["Heads pruned", *(orders[name] for name in shown), "importance − random"]
    return markdown_table(header, rows)


def heads_throughput(stem):
    def table(results):
        rows = [
            [
                f"{100 * row['fraction']:.0f}%",
                f"{row['parameters']:,}",
                f"{row['batch_1']:.1f}",
                f"{row['ratio_batch_1']:.2f}×",
                f"{row['batch_64']:.1f}",
                f"{row['ratio_batch_64']:.2f}×",
            ]
            for row in results(stem)["throughput"]["rows"]
        ]
        header = ["Heads pruned", "Parameters", "Batch 1 (verses/s)", "vs unpruned"]
        return markdown_table(header + ["Batch 64 (verses/s)", "vs unpruned"], rows)

    return table


def keras_hub_bert_pruning(results):
    """Per model of the KerasHub BERT run: heads, parameters, sentences/s and ratios."""
    rows = [
        [
            row["model"],
            row["heads"],
            f"{row['parameters']:,}",
            f"{row['batch_1_per_s']:.1f}",
            f"{row['batch_1_ratio']:.2f}×",
            f"{row['batch_64_per_s']:.1f}",
            f"{row['batch_64_ratio']:.2f}×",
        ]
        for row in results("benchmarks/head_pruning_keras_hub_bert")["results"]["rows"]
    ]
    header = ["model", "heads", "parameters", "batch 1 (/s)", "vs unpruned"]
    return markdown_table(header + ["batch 64 (/s)", "vs unpruned"], rows)


def minilm_diagonals(results):
    data = results("mimetic-minilm-full")
    query_key, value_output = data["query_key_per_head"], data["value_output_per_layer"]
    rows = []
    for layer in range(data["num_layers"]):
        means = query_key["mean_diagonal"][layer]
        rows.append(
            [
                layer,
                f"{sum(value > 0 for value in means)}/{len(means)}",
                f"{statistics.median(query_key['diagonal_score'][layer]):+.2f}",
                f"{value_output['mean_diagonal'][layer]:+.3f}",
                f"{value_output['diagonal_score'][layer]:+.2f}",
            ]
        )
    header = [
        "layer",
        "heads with positive `W_q W_kᵀ` diagonal",
        "median `W_q W_kᵀ` score",
        "`W_v W_o` mean diagonal",
        "`W_v W_o` score",
    ]
    return markdown_table(header, rows)


@_benchmark_rows("attention_core", ["pattern", "L", "Keras MHA (ms)", "core (ms)", "core / Keras"])
def attention_core_benchmark(row):
    return [
        row["pattern"],
        f"{row['length']:,}",
        f"{row['keras_seconds'] * 1e3:.2f}",
        f"{row['core_seconds'] * 1e3:.2f}",
        f"{row['ratio']:.2f}",
    ]


ATTENTION_SPEED_STEPS = {
    "logsparse": "LogSparse (ms)",
    "logsparse_reference": "LogSparse, reference (ms)",
    "causal": "dense causal (ms)",
    "causal_reference": "dense causal, reference (ms)",
    "sdpa": "torch SDPA (ms)",
}
ATTENTION_SPEED_RATIOS = {
    "causal_over_logsparse": "causal / LogSparse",
    "reference_over_native": "LogSparse reference / LogSparse",
    "causal_over_sdpa": "causal / SDPA",
}


@_benchmark_rows(
    "attention_speed",
    ["backend", "L", *ATTENTION_SPEED_STEPS.values(), *ATTENTION_SPEED_RATIOS.values()],
)
def attention_speed(row):
    """Per backend and length: each step's time and the ratios, "–" for a step not timed."""
    milliseconds = {step: f"{s * 1e3:,.1f}" for step, s in row["seconds"].items()}
    return [
        row["backend"],
        f"{row['length']:,}",
        *(milliseconds.get(step, "–") for step in ATTENTION_SPEED_STEPS),
        *(f"{row[ratio]:.2f}" if ratio in row else "–" for ratio in ATTENTION_SPEED_RATIOS),
    ]


def attention_speed_jax_over_tensorflow(results):
    """LogSparse's JAX step time over TF+XLA's, per length."""
    data = results("benchmarks/attention_speed")["results"]
    rows = [[f"{row['length']:,}", f"{row['ratio']:.2f}"] for row in data["jax_over_tensorflow"]]
    return markdown_table(["L", "JAX / TF+XLA (LogSparse)"], rows)


# The CPU targets: (label, backend, length, ratio key, bound, "min" or "max").
ATTENTION_SPEED_TARGETS = [
    *(
        (
            f"torch causal / LogSparse at {length:,}",
            "torch",
            length,
            "causal_over_logsparse",
            bound,
            "min",
        )
        for length, bound in ((1024, 1.5), (8192, 10.0), (16384, 20.0))
    ),
    *(
        (f"JAX / TF LogSparse at {length:,}", None, length, "jax_over_tensorflow", 1.3, "max")
        for length in (1024, 4096, 8192, 16384)
    ),
    *(
        (
            f"{name} causal / torch SDPA at {length:,}",
            backend,
            length,
            "causal_over_sdpa",
            2.0,
            "max",
        )
        for backend, name in (("jax", "JAX"), ("tensorflow", "TF"))
        for length in (4096, 16384)
    ),
    (
        "lowest causal / LogSparse from 1,024, any backend",
        None,
        1024,
        "lowest_causal_over_logsparse",
        1.0,
        "min",
    ),
]


def _attention_speed_value(data, backend, length, key):
    """One ratio of a run: a row's, `jax_over_tensorflow`'s at `length`, or the lowest from it."""
    if key == "lowest_causal_over_logsparse":
        rows = [row for row in data["rows"] if row["length"] >= length]
        return min(row["causal_over_logsparse"] for row in rows)
    if backend is None:
        rows = data["jax_over_tensorflow"]
        return next(row["ratio"] for row in rows if row["length"] == length)
    rows = data["rows"]
    return next(row[key] for row in rows if row["backend"] == backend and row["length"] == length)


# The runs of `attention_speed.py` on a second machine, kept apart from the runs of record.
SECOND_MACHINE = "benchmarks/attention_speed_second_machine"


def attention_speed_targets(results):
    """Each CPU target's ratio in every run of the run of record's commit, and their median."""
    return _attention_speed_targets(results, "benchmarks/attention_speed", SECOND_MACHINE)


def attention_speed_targets_second_machine(results):
    """The same for the runs of the second machine (the commit of its first run)."""
    return _attention_speed_targets(results, f"{SECOND_MACHINE}_run1", None)


def _attention_speed_targets(results, record, excluded):
    commit = results(record)["meta"]["commit"]
    prefix = record.removesuffix("_run1")
    stems = [
        stem
        for stem in results.stems()
        if stem.startswith(prefix)
        and not (excluded and stem.startswith(excluded))
        and results(stem)["meta"]["commit"] == commit
    ]
    header = ["target", *(f"`{stem.split('/')[-1]}`" for stem in stems), "median", "met"]
    rows = []
    for label, backend, length, key, bound, kind in ATTENTION_SPEED_TARGETS:
        values = [
            _attention_speed_value(results(stem)["results"], backend, length, key) for stem in stems
        ]
        median = statistics.median(values)
        met = median >= bound if kind == "min" else median <= bound
        sign = "≥" if kind == "min" else "≤"
        cells = [f"{value:.2f}" for value in values]
        rows.append(
            [f"{label} ({sign} {bound:g})", *cells, f"{median:.2f}", "yes" if met else "**no**"]
        )
    return markdown_table(header, rows)


@_benchmark_rows("bsarec_training", ["model", "way", "XLA", "sequences/s"])
def bsarec_training_benchmark(row):
    """Training sequences/s per model and way, XLA on and off."""
    jit_compile = "on" if row["jit_compile"] else "off"
    return [row["model"], row["way"], jit_compile, f"{row['sequences_per_s']:,.0f}"]


def bsarec_training_speedup(results):
    """Per model: each way's best over the former way's best, and the loss check."""
    data = results("benchmarks/bsarec_training")["results"]
    rows = [
        [model, way, f"{ratio:.2f}x"]
        for model, ratios in data["speedup"].items()
        for way, ratio in ratios.items()
    ]
    speed = markdown_table(["model", "way", "best / former way's best"], rows)
    steps = data["config"]["trajectory_steps"]
    gaps = [
        [g["model"], "on" if g["jit_compile"] else "off", f"{g['max_loss_difference']:.1e}"]
        for g in data["trajectory"]
    ]
    header = ["model", "XLA", f"largest loss difference, first {steps} steps"]
    return speed + "\n\n" + markdown_table(header, gaps)


def _mib(value):
    return "not run" if value is None else f"{value / 2**20:,.0f}"


def _ratio(value, digits=0):
    return "–" if value is None else f"{value:,.{digits}f}"


def logsparse_benchmark(backend):
    """The dense-vs-LogSparse rows of one backend; planned columns where XLA reports a plan."""

    def table(results):
        data = results("benchmarks/logsparse")["results"][backend]
        planned = backend == "jax"
        header = ["L"]
        for layer in ("dense", "LogSparse"):
            header += [f"{layer} planned"] * planned + [f"{layer} measured", f"{layer} time (s)"]
        header += ["planned ratio"] * planned + ["measured ratio", "time ratio"]
        rows = []
        for dense, sparse in zip(data["dense"], data["logsparse"], strict=True):
            row = [f"{sparse['length']:,}"]
            for entry in (dense, sparse):
                ran = entry.get("ran")
                row += [_mib(entry.get("planned_bytes"))] * planned
                row += [_mib(entry["rss_bytes"]) if ran else "not run"]
                row += [f"{entry['seconds']:.3f}" if ran else "–"]
            ratios = sparse.get("ratios", {})
            row += [_ratio(ratios.get("planned_bytes"))] * planned
            row += [_ratio(ratios.get("rss_bytes")), _ratio(ratios.get("seconds"), 1)]
            rows.append(row)
        return markdown_table(header, rows)

    return table


def logsparse_benchmark_growth(results):
    data = results("benchmarks/logsparse")["results"]
    rows = []
    for backend, name in (("jax", "JAX + XLA"), ("tensorflow", "TF + XLA")):
        for layer, label in (("dense", "dense"), ("logsparse", "LogSparse")):
            exponents = data[backend]["growth_exponents"][layer]
            rows.append(
                [name, label]
                + [
                    "–" if exponents[key] is None else f"{exponents[key]:.2f}"
                    for key in ("planned_bytes", "rss_bytes", "seconds")
                ]
            )
    return markdown_table(["backend", "layer", "planned memory", "measured memory", "time"], rows)


def _met(value, target, above=True, unit="×"):
    if value is None:
        return "–"
    met = value >= target if above else value <= target
    shown = f"{value:,.0f}×" if unit == "×" else f"{value:.2f}"
    return f"{shown}, " + ("met" if met else "**not met**")


def logsparse_benchmark_targets(results):
    """The issue's targets at L = 8192 and 65,536, per backend, from the benchmark file."""
    data = results("benchmarks/logsparse")["results"]

    def at(backend, length):
        rows = data[backend]["logsparse"]
        return next((row for row in rows if row["length"] == length), {})

    def ratio(backend, key):
        return at(backend, 8192).get("ratios", {}).get(key)

    def exponent(backend, key):
        return data[backend]["growth_exponents"]["logsparse"][key]

    def largest(backend):
        row = at(backend, 65536)
        if not row.get("ran"):
            return "not run"
        ran = f"ran in {row['seconds']:.2f} s"
        planned = row.get("planned_bytes")
        if planned is None:
            return f"{ran} (no plan available)"
        met = "met" if planned < 512 * 2**20 else "**not met**"
        return f"planned {_mib(planned)} MiB, {met}; {ran}"

    rows = [["planned memory ≥ 100× less than dense at 8,192"]]
    rows[0] += [_met(ratio("jax", "planned_bytes"), 100), "– (no plan available)"]
    rows.append(["measured memory ≥ 50× less at 8,192"])
    rows[1] += [_met(ratio(b, "rss_bytes"), 50) for b in ("jax", "tensorflow")]
    rows.append(["time ≥ 10× faster at 8,192"])
    rows[2] += [_met(ratio(b, "seconds"), 10) for b in ("jax", "tensorflow")]
    rows.append(["LogSparse memory growth exponent ≤ 1.1 (planned / measured)"])
    rows[3] += [
        f"{_met(exponent('jax', 'planned_bytes'), 1.1, False, '')} / "
        f"{_met(exponent('jax', 'rss_bytes'), 1.1, False, '')}",
        f"– / {_met(exponent('tensorflow', 'rss_bytes'), 1.1, False, '')}",
    ]
    rows.append(["LogSparse step at 65,536 (planned < 512 MiB)"])
    rows[4] += [largest(b) for b in ("jax", "tensorflow")]
    return markdown_table(["target", "JAX + XLA", "TF + XLA"], rows)


def exact_cross_entropy(results):
    """Cross-entropy (bits) of each exact model at each length; accuracy everywhere 1 or not."""
    data = results("benchmarks/exact_cross_entropy")["results"]
    rows = [
        [row["task"].upper(), row["model"], *(f"{bits:.4f}" for bits in row["bits"])]
        + ["1.000" if min(row["accuracy"]) == 1.0 else f"{min(row['accuracy']):.3f}"]
        for row in data["rows"]
    ]
    header = ["task", "model", *(f"n = {n:,}" for n in data["lengths"]), "lowest accuracy"]
    return markdown_table(header, rows)


GPU_CHECK_BACKENDS = (("jax", "JAX + XLA"), ("torch", "torch eager"))
GPU_CHECK_DTYPES = (("float32", "float32"), ("mixed_bfloat16", "bf16"))


def _gpu_check_report(results, backend):
    return results(f"benchmarks/gpu_check_{backend}")["results"]["reports"][0]


def gpu_check_outputs(results):
    """Largest output error against the CPU, per layer, backend and dtype."""
    reports = {b: _gpu_check_report(results, b) for b, _ in GPU_CHECK_BACKENDS}
    columns = [(b, d) for b, _ in GPU_CHECK_BACKENDS for d, _ in GPU_CHECK_DTYPES]
    errors = {
        column: {
            row["layer"]: row["relative_error"]
            for row in reports[column[0]]["dtypes"][column[1]]["outputs"]
        }
        for column in columns
    }
    layers = list(errors[columns[0]])
    rows = [[layer] + [f"{errors[column][layer]:.1e}" for column in columns] for layer in layers]
    names = dict(GPU_CHECK_BACKENDS) | dict(GPU_CHECK_DTYPES)
    header = ["layer"] + [f"{names[b]}, {names[d]}" for b, d in columns]
    return markdown_table(header, rows)


def _steps(value):
    """Steps per second, or what stopped the step: its memory, or the check's time budget."""
    if isinstance(value, float):
        return f"{value:,.1f}"
    return "skipped (time budget)" if value.startswith("skipped") else "out of memory"


def gpu_check_throughput(results):
    """Forward+backward steps per second of each layer and its first baseline, and their ratio."""
    rows = []
    for backend, backend_name in GPU_CHECK_BACKENDS:
        report = _gpu_check_report(results, backend)
        for dtype, dtype_name in GPU_CHECK_DTYPES:
            for row in report["dtypes"][dtype].get("throughput", []):
                (layer, ours), (baseline, theirs) = list(row["steps_per_second"].items())[:2]
                both = isinstance(ours, float) and isinstance(theirs, float)
                ratio = f"{ours / theirs:.2f}×" if both else "–"
                rows.append(
                    [backend_name, dtype_name, f"{row['length']:,}", f"{layer} / {baseline}"]
                    + [_steps(ours), _steps(theirs), ratio]
                )
    header = ["backend", "dtype", "L", "layer / baseline", "layer (steps/s)"]
    return markdown_table(header + ["baseline (steps/s)", "ratio"], rows)


def _gpu_check_pending(section):
    return (
        f"**Pending.** The committed GPU check predates its `{section}` section: run "
        "`python benchmarks/gpu_check.py --output-dir results/benchmarks` on a GPU, commit its "
        "JSON files and regenerate the docs."
    )


def gpu_check_kernels(results):
    """Largest error of each native kernel against its reference on the GPU, per dtype."""
    reports = {b: _gpu_check_report(results, b) for b, _ in GPU_CHECK_BACKENDS}
    if not all("kernels" in report for report in reports.values()):
        return _gpu_check_pending("kernels")
    rows = [
        [name, row["kernel"], row["dtype"], f"{row['relative_error']:.1e}"]
        for backend, name in GPU_CHECK_BACKENDS
        for row in reports[backend]["kernels"]
    ]
    return markdown_table(["backend", "kernel", "dtype", "native / reference error"], rows)


def gpu_check_latencies(results):
    """AdaViT fast path and half-pruned encoder against their full models, batch 1 and 64."""
    reports = {b: _gpu_check_report(results, b) for b, _ in GPU_CHECK_BACKENDS}
    if not all(isinstance(report.get("latencies"), dict) for report in reports.values()):
        return _gpu_check_pending("latencies")
    rows = []
    for backend, name in GPU_CHECK_BACKENDS:
        latencies = reports[backend]["latencies"]
        for batch, entry in latencies.get("head_pruning", {}).items():
            rows.append([name, "encoder, half the heads pruned", batch, f"{entry['ratio']:.2f}×"])
        adavit = latencies.get("adavit")  # a sentence where it did not run (torch)
        for case in adavit if isinstance(adavit, list) else []:
            label = f"AdaViT fast path, {case['policy']} decisions"
            rows.append([name, label, str(case["batch"]), f"{case['speedup']:.2f}×"])
    return markdown_table(["backend", "model", "batch", "full / faster model"], rows)


def _committed(results, matches):
    """The result files whose `meta` satisfies `matches`, with each run's wall time."""
    cells = []
    for stem in results.stems():
        meta = results(stem).get("meta", {})
        if matches(meta):
            cells.append(f"`results/{stem}.json` ({meta['wall_time_s']:.0f} s)")
    return ", ".join(cells) or "**pending**"


def _runs_reproduction(name, setting):
    def matches(meta):
        words = meta.get("command", "").split()
        ran = "reproduce" in words and words[words.index("reproduce") + 1 :][:1] == [name]
        return ran and meta.get("setting") == setting

    return matches


def _runs_script(script):
    def matches(meta):
        return any(pathlib.Path(word).name == script for word in meta.get("command", "").split())

    return matches


def reproduction_runs(results):
    """Each reproduction's result files per setting, or pending.

    A file belongs to the run its `meta` command names (`reproduce NAME`).
    """
    rows = [
        [
            f"[`{name}`]({entry.page})",
            *(_committed(results, _runs_reproduction(name, s)) for s in ("fast", "full")),
        ]
        for name, entry in REPRODUCTIONS.items()
    ]
    return markdown_table(["reproduction", "fast setting", "full setting"], rows)


def benchmark_runs(results):
    """Each script of `benchmarks/` with the result files its command wrote, or pending."""
    rows = [
        [f"`benchmarks/{script.name}`", _committed(results, _runs_script(script.name))]
        for script in sorted((ROOT / "benchmarks").glob("*.py"))
    ]
    return markdown_table(["benchmark", "result files"], rows)


# The deployment matrix's columns, (backend, path), grouped by path in this order.
DEPLOYMENT_COLUMNS = (
    ("tensorflow", "saved_model"),
    ("jax", "saved_model"),
    ("torch", "saved_model"),
    ("tensorflow", "onnx"),
    ("jax", "onnx"),
    ("torch", "onnx"),
    ("tensorflow", "litert"),
)
DEPLOYMENT_PATHS = {"saved_model": "SavedModel", "onnx": "ONNX", "litert": "LiteRT"}
DEPLOYMENT_BACKENDS = {"tensorflow": "TF", "jax": "JAX", "torch": "torch"}


def _deployment_limits(outcomes):
    """Each distinct workaround of the matrix, numbered in the order the table meets it."""
    limits = {}
    for case in next(iter(outcomes.values())):
        for column in DEPLOYMENT_COLUMNS:
            workaround = outcomes[column][case].get("workaround")
            if workaround and workaround not in limits:
                limits[workaround] = len(limits) + 1
    return limits


def _deployment_outcomes(results):
    data = results("deployment-matrix")["results"]
    return {(backend, path): data[backend][path] for backend, path in DEPLOYMENT_COLUMNS}


def deployment_matrix(results):
    """Per layer or builder and per export path: works, or the number of its upstream limit."""
    outcomes = _deployment_outcomes(results)
    limits = _deployment_limits(outcomes)

    def cell(outcome):
        if outcome["outcome"] == "works":
            return "works"
        if outcome["outcome"] == "upstream limit":
            return f"limit {limits[outcome['workaround']]}"
        return "<strong>fails</strong>"

    cases = next(iter(outcomes.values()))
    rows = [
        [
            f"<code>{html.escape(case)}</code>",
            *(cell(outcomes[column][case]) for column in DEPLOYMENT_COLUMNS),
        ]
        for case in cases
    ]
    return _deployment_grid(rows)


def _deployment_grid(rows):
    """An HTML table with a header row of export paths over one of backends.

    Compact where a markdown table is not: each path heads its backends once,
    and the `deployment-grid` style of `docs/stylesheets/extra.css` breaks a
    name only between words.
    """
    paths = [path for _, path in DEPLOYMENT_COLUMNS]
    groups = [(path, paths.count(path)) for path in dict.fromkeys(paths)]
    path_row = "".join(f'<th colspan="{n}">{DEPLOYMENT_PATHS[path]}</th>' for path, n in groups)
    backend_row = "".join(f"<th>{DEPLOYMENT_BACKENDS[b]}</th>" for b, _ in DEPLOYMENT_COLUMNS)
    body = ["<tr>" + "".join(f"<td>{cell}</td>" for cell in row) + "</tr>" for row in rows]
    return "\n".join(
        [
            '<table class="deployment-grid">',
            "<thead>",
            f'<tr><th rowspan="2">layer or builder</th>{path_row}</tr>',
            f"<tr>{backend_row}</tr>",
            "</thead>",
            "<tbody>",
            *body,
            "</tbody>",
            "</table>",
        ]
    )


def deployment_limits(results):
    """The matrix's upstream limits, numbered as in its table, with each workaround."""
    limits = _deployment_limits(_deployment_outcomes(results))
    return markdown_table(
        ["limit", "what stops it, and the workaround"],
        [[number, text] for text, number in limits.items()],
    )


TABLES = {
    "deployment-matrix": deployment_matrix,
    "deployment-limits": deployment_limits,
    "reproduction-runs": reproduction_runs,
    "benchmark-runs": benchmark_runs,
    "logsparse-fast": logsparse("logsparse-fast"),
    "logsparse-full": logsparse("logsparse-full"),
    "logsparse-fast-budget": logsparse_budget("logsparse-fast"),
    "logsparse-full-budget": logsparse_budget("logsparse-full"),
    "logsparse-full-budget-paired": logsparse_budget_paired("logsparse-full"),
    "parity-first-fast": parity("parity-fast"),
    "parity-first-reduced": parity("parity-reduced-full"),
    "parity-reduced-parity-runs": parity_runs("parity-reduced-full", "parity"),
    "parity-first-full": pending_until(
        "parity-full",
        "keras-attn reproduce parity --full --workers 2 --out runs/parity-full",
        parity("parity-full"),
    ),
    "parity-full-parity-runs": pending_until(
        "parity-full",
        "keras-attn reproduce parity --full --workers 2 --out runs/parity-full",
        parity_runs("parity-full", "parity"),
    ),
    "parity-first-full-learned-positions": parity("parity-full-learned-positions"),
    "mimetic-full": mimetic("mimetic-full"),
    "mimetic-minilm": minilm_diagonals,
    "t2t-full": t2t("t2t-full"),
    "topics-full-end-state": topics_end_state("topics-full"),
    "topics-full-take-off": topics_take_off("topics-full"),
    "topics-full-minilm": topics_minilm("topics-full"),
    "heads-full-curves": heads_curves("heads-full"),
    "heads-full-throughput": heads_throughput("heads-full"),
    "head-pruning-keras-hub-bert": pending_until(
        "benchmarks/head_pruning_keras_hub_bert",
        "python benchmarks/head_pruning.py --model keras-hub-bert --repeats 10",
        keras_hub_bert_pruning,
    ),
    "adavit-full": pending_until(
        "adavit-full",
        "keras-attn reproduce adavit --full --out runs/adavit-full",
        adavit("adavit-full"),
    ),
    "adavit-full-paired": adavit_paired("adavit-full"),
    "adavit-converged": pending_until(
        "adavit-converged", ADAVIT_CONVERGED_COMMAND, adavit_converged("adavit-converged")
    ),
    "adavit-converged-claims": pending_until(
        "adavit-converged", ADAVIT_CONVERGED_COMMAND, adavit_converged_claims("adavit-converged")
    ),
    "adavit-ablation": adavit_ablation,
    "adavit-benchmark": pending_until(
        "benchmarks/adavit", "python benchmarks/adavit.py", adavit_benchmark
    ),
    "adavit-paper-scale": adavit_paper_scale,
    "t2t-vit-benchmark": t2t_benchmark,
    "attention-core-benchmark": attention_core_benchmark,
    "attention-speed": attention_speed,
    "gpu-check-kernels": gpu_check_kernels,
    "gpu-check-latencies": gpu_check_latencies,
    "attention-speed-jax-over-tensorflow": attention_speed_jax_over_tensorflow,
    "attention-speed-targets": attention_speed_targets,
    "attention-speed-targets-second-machine": attention_speed_targets_second_machine,
    "bsarec-training-benchmark": bsarec_training_benchmark,
    "bsarec-training-speedup": bsarec_training_speedup,
    "logsparse-benchmark-jax": logsparse_benchmark("jax"),
    "logsparse-benchmark-tensorflow": logsparse_benchmark("tensorflow"),
    "logsparse-benchmark-targets": logsparse_benchmark_targets,
    "logsparse-benchmark-growth": logsparse_benchmark_growth,
    "bsarec-fast": bsarec("bsarec-fast"),
    "bsarec-full": bsarec("bsarec-full"),
    "bsarec-full-differences": bsarec_differences("bsarec-full"),
    "bsarec-full-search": bsarec_search("bsarec-full"),
    "fourier-filter-benchmark": fourier_filter,
    "ffn-memories-fast": ffn_memories("ffn-memories-fast"),
    "ffn-memories-full": ffn_memories("ffn-memories-full"),
    "ffn-memories-benchmark": ffn_memories_benchmark,
    "exact-cross-entropy": exact_cross_entropy,
    "gpu-check-outputs": gpu_check_outputs,
    "gpu-check-throughput": gpu_check_throughput,
}
