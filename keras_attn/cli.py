"""The `keras-attn` command line (also `python -m keras_attn`): the tour and the reproductions.

The command line imports Keras (and so the backend) only once it knows which
command runs, so `keras-attn --help` answers at once. Every option is checked
while the command line is parsed, before anything trains. TensorFlow's C++
INFO log lines are hidden unless `TF_CPP_MIN_LOG_LEVEL` is set by the user.
"""

import argparse
import contextlib
import importlib
import importlib.metadata
import importlib.util
import json
import os
import re
import sys
import tempfile
import textwrap

from keras_attn._optional import missing_modules
from keras_attn.datasets.errors import DatasetNotFoundError
from keras_attn.reproduce import REPRODUCTIONS, RESULTS_PAGE
from keras_attn.utils.validation import output_folder

# TensorFlow's own INFO lines, printed to the C-level stderr before its log level is read.
_TENSORFLOW_INFO = re.compile(
    r"^(I\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] |WARNING: All log messages before absl::InitializeLog)"
)

_DESCRIPTION = """\
Self-attention layers for Keras 3: a guided tour and paper reproductions.

  keras-attn tour                  train, export and reload a small model
  keras-attn reproduce NAME        a paper's effect at the fast setting (a smoke test)
  keras-attn reproduce NAME --full the documented full-size setting
  keras-attn reproduce NAME --help what NAME does, its options and run times
"""

_SEEDS_HELP = "--seeds N runs the seeds 0, 1, ..., N-1"
_TAKE_SEEDS = ", ".join(name for name, entry in REPRODUCTIONS.items() if entry.seeds)


def build_parser(argv=None):
    """The argument parser; only the command named in `argv` imports its module."""
    argv = sys.argv[1:] if argv is None else list(argv)
    chosen = argv[:2]
    parser = argparse.ArgumentParser(
        prog="keras-attn",
        description=_DESCRIPTION,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    tour_parser = commands.add_parser(
        "tour",
        help="Train a one-block transformer on Fashion-MNIST, export it and reload it.",
        description="Train a one-block transformer on Fashion-MNIST rows with XLA, export it "
        "as a SavedModel, reload it and check it serves the same predictions.",
    )
    if chosen[:1] == ["tour"]:
        tour = _import_quietly("keras_attn.tour")
        tour.add_arguments(tour_parser)
        tour_parser.set_defaults(run=tour.run)
    reproduce_parser = commands.add_parser(
        "reproduce",
        help="Reproduce a paper's effect (fast setting by default, --full for the documented one).",
        description="Reproduce a paper's effect. Without --full each runs its fast setting, a "
        "smoke test whose numbers are not the paper's result. Run times are orders of "
        f"magnitude on 2 CPU cores; docs/{RESULTS_PAGE} has the measured ones. "
        f"{_SEEDS_HELP} in {_TAKE_SEEDS}; the others take one --seed.",
    )
    papers = reproduce_parser.add_subparsers(dest="paper", required=True, metavar="NAME")
    for name, entry in REPRODUCTIONS.items():
        paper_parser = papers.add_parser(
            name,
            help=f"{entry.help} Fast: {entry.fast_time}; --full: {entry.full_time}.",
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        paper_parser.add_argument(
            "--full",
            action="store_true",
            help=f"run the documented full-size setting ({entry.full_time} on 2 CPU cores) "
            f"instead of the fast smoke test ({entry.fast_time})",
        )
        paper_parser.add_argument(
            "--out",
            type=output_folder,
            default=f"runs/{name}",
            help="folder for the JSON and PNG results, writable or creatable "
            "(default: %(default)s)",
        )
        if chosen == ["reproduce", name]:
            module = _import_quietly(f"keras_attn.reproduce.{entry.module}")
            module.add_arguments(paper_parser)
            paper_parser.description = _describe(module, entry)
            paper_parser.set_defaults(run=module.run)
    return parser


def version():
    """The installed `keras-attn` version, or `"unknown (not installed)"`."""
    try:
        return importlib.metadata.version("keras-attn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv=None):
    """Runs the command in `argv` (default `sys.argv[1:]`); returns the exit status."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")  # INFO off, before TF is imported
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["tour"] or (argv[:1] == ["reproduce"] and argv[1:2] in _papers()):
        problem = _missing_requirement(argv[0])
        if problem:
            print(problem, file=sys.stderr)
            return 1
    args = build_parser(argv).parse_args(argv)
    _announce(args)
    try:
        args.run(args)
    except DatasetNotFoundError as error:  # the message says how to install the data
        print(f"keras-attn {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


def _papers():
    return [[name] for name in REPRODUCTIONS]


# Keras backend name -> the module it needs.
_BACKEND_MODULES = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}


def _missing_requirement(command):
    """Says what to install when the backend or the `reproduce` extra is missing, else `None`."""
    if "keras" not in sys.modules:
        backend = os.environ.get("KERAS_BACKEND") or _configured_backend()
        module = _BACKEND_MODULES.get(backend, backend)
        if importlib.util.find_spec(module) is None:
            return (
                f"keras-attn {command} needs a Keras backend: Keras is set to the {backend!r} "
                f"backend, but `{module}` is not installed. Install one with "
                '`pip install "keras-attn[tensorflow]"` (or `[jax]`, `[torch]`, with '
                "KERAS_BACKEND=jax or torch)."
            )
    needed = missing_modules("reproduce")
    if needed:
        return (
            f'keras-attn {command} needs the "reproduce" extra; missing: {", ".join(needed)}. '
            'Install it with `pip install "keras-attn[reproduce]"`.'
        )
    return None


def _configured_backend():
    """The backend in Keras' config file (`~/.keras/keras.json`), `tensorflow` by default."""
    folder = os.environ.get("KERAS_HOME") or os.path.join(os.path.expanduser("~"), ".keras")
    try:
        with open(os.path.join(folder, "keras.json")) as config:
            return json.load(config).get("backend", "tensorflow")
    except (OSError, ValueError):
        return "tensorflow"


def _describe(module, entry):
    doc = (module.__doc__ or entry.help).strip()
    times = (
        "Run time on 2 CPU cores, order of magnitude:\n"
        f"  fast setting (default): {entry.fast_time}\n"
        f"  --full: {entry.full_time}"
    )
    seeds = f" {_SEEDS_HELP}." if entry.seeds else ""
    notes = textwrap.fill(
        "The fast setting is a smoke test: its numbers are not the paper's result. Results "
        f"and the paper's numbers: docs/{entry.page}; measured run times: "
        f"docs/{RESULTS_PAGE}.{seeds}",
        width=76,
    )
    return f"{doc}\n\n{times}\n{notes}"


def _setting(args):
    from keras_attn.reproduce._run import setting_name

    return setting_name(args)


def _announce(args):
    """Says which setting runs; returns it (`None` for the tour)."""
    if args.command != "reproduce":
        return None
    entry = REPRODUCTIONS[args.paper]
    setting = _setting(args)
    if setting == "small":
        print(f"KERAS_ATTN_SMALL is set: {args.paper} runs its tiny test setting.")
    elif setting == "fast":
        print(
            f"Running the FAST setting of {args.paper} ({entry.fast_time} on 2 CPU cores): a "
            "smoke test whose numbers are not the paper's result. Add --full for the "
            f"documented setting ({entry.full_time})."
        )
    else:
        print(f"Running the full setting of {args.paper} ({entry.full_time} on 2 CPU cores).")
    return setting


def _import_quietly(module):
    """Imports `module`, hiding TensorFlow's INFO lines unless the user set a log level."""
    if "keras" in sys.modules or os.environ.get("TF_CPP_MIN_LOG_LEVEL", "1") != "1":
        return importlib.import_module(module)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    with _filtered_stderr():
        return importlib.import_module(module)


@contextlib.contextmanager
def _filtered_stderr():
    """Sends the process's stderr (fd 2) through a filter that drops TensorFlow INFO lines."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as captured:
        os.dup2(captured.fileno(), 2)
        try:
            yield
        finally:
            sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            captured.seek(0)
            for line in captured.read().decode(errors="replace").splitlines(keepends=True):
                if not _TENSORFLOW_INFO.match(line):
                    sys.stderr.write(line)


if __name__ == "__main__":
    sys.exit(main())
