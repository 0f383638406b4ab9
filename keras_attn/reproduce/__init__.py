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
The image-classification reproductions share their data scaling, augmented
training and paired comparison in `keras_attn.reproduce._images`.
The library logic a reproduction calls lives in the library packages.

`REPRODUCTIONS` lists them without importing them: a module (with its
plotting and data dependencies) is imported only when its reproduction is
asked for. Its run times are orders of magnitude,
not measurements, so that a rerun never means editing them: the measured
times are in the docs. Tests check that the list matches the modules and
that every committed run's time falls in its band.
"""

import dataclasses
import importlib
import math
import pkgutil

from keras_attn.utils.validation import check_choice

# Order-of-magnitude run times on 2 idle CPU cores, and the wall times (s) each
# covers. The measured time of every committed run is on the Results page of
# the docs; a test checks that it falls in its entry's band, give or take a
# factor of 2 for a busy machine.
RUN_TIMES = {
    "a minute or two": (0, 180),
    "several minutes": (180, 900),
    "about half an hour": (900, 3600),
    "hours": (3600, math.inf),
}
"""Maps each run-time estimate the command line shows to its band in seconds."""

RESULTS_PAGE = "results.md"
"""The docs page that lists the measured wall time of every committed run."""


@dataclasses.dataclass(frozen=True)
class Reproduction:
    """What the command line says about one reproduction before importing it.

    Attributes:
        module: module name inside `keras_attn.reproduce`.
        help: one line, the module's `HELP`.
        fast_time: order of magnitude of the fast (default) setting's wall
            time on 2 CPU cores, a key of `RUN_TIMES`.
        full_time: the same for `--full`.
        page: the documentation page of the paper, relative to `docs/`.
        seeds: whether the reproduction takes `--seeds N` (the seeds
            `0..N-1`); the others take one `--seed`.
    """

    module: str
    help: str
    fast_time: str
    full_time: str
    page: str
    seeds: bool

    def __post_init__(self):
        for name in ("fast_time", "full_time"):
            check_choice(name, getattr(self, name), tuple(RUN_TIMES))


REPRODUCTIONS = {
    "adavit": Reproduction(
        "adavit",
        "AdaViT on Fashion-MNIST: accuracy vs MACs and fast-path latency at several γ.",
        "several minutes",
        "about half an hour",
        "adavit.md",
        seeds=True,
    ),
    "adavit-converged": Reproduction(
        "adavit_converged",
        "AdaViT from a converged ViT on Fashion-MNIST: learned vs random vs equal-MACs dense ViT.",
        "about half an hour",
        "hours",
        "adavit.md",
        seeds=True,
    ),
    "bsarec": Reproduction(
        "bsarec",
        "BSARec vs SASRec next-item recommendation on MovieLens-100K.",
        "a minute or two",
        "hours",
        "bsarec.md",
        seeds=True,
    ),
    "ffn-memories": Reproduction(
        "ffn_memories",
        "Key-value memories in the feed-forward layers of a word-level LM on Jane Austen.",
        "a minute or two",
        "about half an hour",
        "ffn-memories.md",
        seeds=False,
    ),
    "heads": Reproduction(
        "heads",
        "Head importance and pruning of MiniLM on Bible-section classification (Michel et al.).",
        "several minutes",
        "several minutes",
        "head-pruning.md",
        seeds=False,
    ),
    "logsparse": Reproduction(
        "logsparse",
        "LogSparse + convolutional attention vs full attention, same window and same memory.",
        "a minute or two",
        "about half an hour",
        "logsparse.md",
        seeds=False,
    ),
    "mimetic": Reproduction(
        "mimetic",
        "Small ViT on Fashion-MNIST: default vs mimetic attention init; MiniLM weight analysis.",
        "several minutes",
        "about half an hour",
        "mimetic-init.md",
        seeds=True,
    ),
    "parity": Reproduction(
        "parity",
        "FIRST/PARITY length generalisation with and without log-length scaled attention.",
        "a minute or two",
        "several minutes",
        "parity-first.md",
        seeds=True,
    ),
    "t2t": Reproduction(
        "t2t",
        "T2T-ViT on Fashion-MNIST: T2T module vs patches, deep-narrow vs shallow-wide.",
        "several minutes",
        "about half an hour",
        "t2t-vit.md",
        seeds=True,
    ),
    "topics": Reproduction(
        "topics",
        "Topic structure in a one-layer attention model trained on LDA data, and in MiniLM.",
        "several minutes",
        "several minutes",
        "topic-structure.md",
        seeds=True,
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
