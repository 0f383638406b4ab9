"""The docs tables that `docs_tables` generates, each from result files.

Each entry of `TABLES` maps a table name (used in a page's
`<!-- results:table NAME -->` marker) to a function of a `Results` reader
that returns the markdown table.
"""

import statistics

from keras_attn.utils.docs_tables import markdown_table

LOGSPARSE_MODELS = {
    "seasonal_naive": "seasonal naive (previous day)",
    "full_k1": "full attention, `k = 1`",
    "full_k9": "full attention, `k = 9`",
    "logsparse_k1": "LogSparse (local), `k = 1`",
    "logsparse_conv": "LogSparse (local) + conv, `k = 9`",
}
PARITY_SCALES = {"none": "plain", "log_length": "log-length scaled"}
T2T_MODELS = {
    "t2t_vit": "T2T-ViT (width 64, 4 blocks)",
    "vit": "plain ViT, 4×4 patches (width 64, 4 blocks)",
    "deep_narrow": "T2T-ViT deep-narrow (width 64, 8 blocks)",
    "shallow_wide": "T2T-ViT shallow-wide (width 128, 2 blocks)",
}


def logsparse(stem):
    def table(results):
        data = results(stem)["results"]
        datasets = list(data)
        header = ["model"] + [f"{d} {m}" for d in datasets for m in ("R0.5", "R0.9")]
        models = [name for name in LOGSPARSE_MODELS if name in data[datasets[0]]]
        rows = [
            [LOGSPARSE_MODELS[name]]
            + [f"{data[d][name][m]:.4f}" for d in datasets for m in ("R0.5", "R0.9")]
            for name in models
        ]
        return markdown_table(header, rows)

    return table


def parity(stem):
    def table(results):
        data = results(stem)
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

    return table


def mimetic(stem, labels):
    def table(results):
        data = results(stem)
        seeds = len(data["runs"]["default"])
        header = ["initialization", *(f"seed {s}" for s in range(seeds)), "mean ± std"]
        rows = []
        for init, label in labels.items():
            finals = [f"{run['test_accuracy'][-1]:.4f}" for run in data["runs"][init]]
            summary = data["summary"][init]
            rows.append([label, *finals, f"**{summary['mean']:.4f} ± {summary['std']:.4f}**"])
        return markdown_table(header, rows)

    return table


def t2t(stem):
    def table(results):
        data = results(stem)
        header = ["model", "parameters", "MACs", "test accuracy, mean ± std", "per seed"]
        rows = []
        for name, label in T2T_MODELS.items():
            summary = data["summary"][name]
            seeds = [r["test_accuracy"] for r in data["runs"] if r["model"] == name]
            rows.append(
                [
                    label,
                    f"{summary['parameters']:,}",
                    f"{summary['macs'] / 1e6:.1f}M",
                    f"{summary['mean_accuracy']:.3f} ± {summary['std_accuracy']:.3f}",
                    ", ".join(f"{value:.3f}" for value in seeds),
                ]
            )
        return markdown_table(header, rows)

    return table


def mean_std(values):
    """`mean ± std` of a list, the std over seeds (n − 1)."""
    spread = statistics.stdev(values) if len(values) > 1 else 0.0
    return f"{statistics.mean(values):.4f} ± {spread:.4f}"


TABLES = {
    "logsparse-fast": logsparse("logsparse-fast"),
    "logsparse-full": logsparse("logsparse-full"),
    "parity-first-fast": parity("parity-fast"),
    "mimetic-fast": mimetic(
        "mimetic-fast",
        {
            "default": "default (Glorot uniform kernels)",
            "mimetic": "mimetic (α1 = β1 = 0.7, α2 = β2 = 0.4)",
        },
    ),
    "t2t-fast": t2t("t2t-fast"),
}
