"""Paper reproductions run by `keras-attn reproduce NAME`.

Each module in this package is one reproduction. It defines `NAME` (the
subcommand), `HELP` (one line), `add_arguments(parser)` and `run(args)`,
where `args.out` is the output folder and `args.full` asks for the
documented full-size setting instead of the fast one. Its module docstring
is the description that `keras-attn reproduce NAME --help` prints.

The convention, in `keras_attn.reproduce._run`: a module keeps its sizes in
`SETTINGS` (`"fast"`, `"full"` and optionally `"small"`, the
`KERAS_ATTN_SMALL` size), picks one with `choose_setting(args, SETTINGS)`
(`KERAS_ATTN_SMALL` wins over `--full`; the command line's banner uses the
same `setting_name`) and returns what `finish(args, NAME, results, figure,
started_at=..., setting=...)` returns: `{"setting", "results", "paths"}`.
The library logic a reproduction calls lives in the library packages.

`REPRODUCTIONS` lists them without importing them, so that the command line
starts in well under a second: a module (and Keras with it) is imported only
when its reproduction is asked for. A test checks that the list matches the
modules.
"""

import dataclasses
import importlib
import pkgutil


@dataclasses.dataclass(frozen=True)
class Reproduction:
    """What the command line says about one reproduction before importing it.

    Attributes:
        module: module name inside `keras_attn.reproduce`.
        help: one line, the module's `HELP`.
        fast_time: wall time of the fast (default) setting on 2 CPU cores:
            "measured" with the load of the run where `results/NAME-fast.json`
            is committed (a test checks the number), otherwise an estimate.
        full_time: wall time of `--full` on 2 CPU cores, measured where
            `results/NAME-full.json` is committed (a test checks the
            number), otherwise an estimate.
        page: the documentation page of the paper, relative to `docs/`.
    """

    module: str
    help: str
    fast_time: str
    full_time: str
    page: str


# Times on 2 CPU cores: measured ones come from the `meta` of the committed
# result file, on a shared machine whose load is given; estimates are for idle cores.
REPRODUCTIONS = {
    "adavit": Reproduction(
        "adavit",
        "AdaViT on Fashion-MNIST: accuracy vs MACs and fast-path latency at several γ.",
        "about 5 minutes (estimate)",
        "1652 s (measured at load 1.4)",
        "adavit.md",
    ),
    "bsarec": Reproduction(
        "bsarec",
        "BSARec vs SASRec next-item recommendation on MovieLens-100K.",
        "77 s (measured at load 1.1)",
        "about 4 hours, up to 15 at 200 epochs (estimate)",
        "bsarec.md",
    ),
    "ffn-memories": Reproduction(
        "ffn_memories",
        "Key-value memories in the feed-forward layers of a word-level LM on Jane Austen.",
        "84 s (measured at load 1.7)",
        "1624 s (measured at load 7.2)",
        "ffn-memories.md",
    ),
    "heads": Reproduction(
        "heads",
        "Head importance and pruning of MiniLM on Bible-section classification (Michel et al.).",
        "about 3 minutes (estimate)",
        "848 s (measured at load 1.9)",
        "head-pruning.md",
    ),
    "logsparse": Reproduction(
        "logsparse",
        "LogSparse + convolutional attention vs full attention, same window and same memory.",
        "120 s (measured at load 1.5)",
        "2076 s (measured at load 2.2)",
        "logsparse.md",
    ),
    "mimetic": Reproduction(
        "mimetic",
        "Small ViT on Fashion-MNIST: default vs mimetic attention init; MiniLM weight analysis.",
        "about 5 minutes (estimate)",
        "1942 s (measured at load 1.3)",
        "mimetic-init.md",
    ),
    "parity": Reproduction(
        "parity",
        "FIRST/PARITY length generalisation with and without log-length scaled attention.",
        "60 s (measured at load 2.9)",
        "492 s (measured at load 3.8)",
        "parity-first.md",
    ),
    "t2t": Reproduction(
        "t2t",
        "T2T-ViT on Fashion-MNIST: T2T module vs patches, deep-narrow vs shallow-wide.",
        "about 5 minutes (estimate)",
        "1788 s (measured at load 1.4)",
        "t2t-vit.md",
    ),
    "topics": Reproduction(
        "topics",
        "Topic structure in a one-layer attention model trained on LDA data, and in MiniLM.",
        "about 3 minutes (estimate)",
        "447 s (measured at load 2.6)",
        "topic-structure.md",
    ),
}
"""Maps each reproduction's `NAME` to what the command line shows for it."""


def load(name):
    """Imports and returns the module of the reproduction called `name`."""
    return importlib.import_module(f"{__name__}.{REPRODUCTIONS[name].module}")


def available():
    """Maps each reproduction's `NAME` to its module (imports every one)."""
    modules = (
        importlib.import_module(f"{__name__}.{info.name}")
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
    )
    return {module.NAME: module for module in modules}
