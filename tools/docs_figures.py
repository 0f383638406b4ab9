"""The docs figures that `docs_tables` draws, each from result files.

Each entry of `FIGURES` maps a figure name (used in a page's
`<!-- results:figure NAME -->` marker) to a function of a `Results` reader
that returns a matplotlib figure; the first line of its docstring is the
image's alternative text. `docs_tables` writes it to `docs/img/NAME.svg` and,
with `--check`, fails when the file differs from what the results give.
"""

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from keras_attn.reproduce import adavit, adavit_converged  # noqa: E402
from tools.benchmark_scripts import load_benchmark  # noqa: E402

# An SVG file depends on its drawing alone: no date, fixed element ids.
SVG_OPTIONS = {"format": "svg", "metadata": {"Date": None}}
STYLE = {"svg.hashsalt": "keras_attn", "font.size": 9}


def adavit_tradeoff(results):
    """Test accuracy and fast-path latency against MACs, AdaViT policies and the full ViT."""
    data = results("adavit-full")
    summary, setting = data["summary"], data["setting"]
    figure, (accuracy_axis, latency_axis) = plt.subplots(1, 2, figsize=(10, 3.6))
    adavit.plot_tradeoff(accuracy_axis, summary, adavit.MACS, adavit.ACCURACY)
    latency = adavit.latency(setting["latency_batch"])
    adavit.plot_tradeoff(latency_axis, summary, adavit.MACS, latency)
    figure.suptitle(
        f"AdaViT on Fashion-MNIST (results/adavit-full.json), "
        f"mean ± std over {setting['seeds']} seeds"
    )
    figure.tight_layout()
    return figure


def adavit_converged_tradeoff(results):
    """AdaViT from a converged ViT: accuracy against MACs, against latency, and beside the paper."""
    return adavit_converged.plot(results("adavit-converged"))


def attention_speed(results):
    """Training-step time of LogSparse and dense causal attention against length, per backend."""
    benchmark = load_benchmark("attention_speed")
    return benchmark.figure(results("benchmarks/attention_speed")["results"])


FIGURES = {
    "adavit-tradeoff": adavit_tradeoff,
    "adavit-converged": adavit_converged_tradeoff,
    "attention-speed": attention_speed,
}


def svg(name, results):
    """The SVG text of figure `name`, drawn from `results`."""
    with matplotlib.rc_context():
        matplotlib.rcdefaults()  # what another caller changed does not count
        matplotlib.rcParams.update(STYLE)
        figure = FIGURES[name](results)
        buffer = io.StringIO()
        figure.savefig(buffer, **SVG_OPTIONS)
    plt.close(figure)
    return buffer.getvalue()


def alt_text(name):
    """The image's alternative text: the first docstring line of its function."""
    return FIGURES[name].__doc__.splitlines()[0].rstrip(".")
