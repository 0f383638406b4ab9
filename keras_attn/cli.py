"""The `keras-attn` command line (also `python -m keras_attn`): the tour and the reproductions.

`keras-attn --help`, `--version` and `keras-attn reproduce --help` import
neither Keras nor a backend (`keras_attn/__init__.py` skips its eager import
for the command line); a command imports Keras when it is chosen, before its
module. Every option is checked while the command line is parsed, before
anything trains.
"""

import argparse
import importlib
import importlib.metadata
import importlib.util
import sys
import textwrap

from keras_attn._optional import import_keras, missing_packages
from keras_attn.datasets.errors import DatasetNotFoundError
from keras_attn.reproduce import REPRODUCTIONS, RESULTS_PAGE
from keras_attn.utils.validation import output_folder

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
        tour = _import_command("keras_attn.tour")
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
            module = _import_command(f"keras_attn.reproduce.{entry.module}")
            module.add_arguments(paper_parser)
            paper_parser.description = _describe(module, entry)
            paper_parser.set_defaults(run=module.run)
            if hasattr(module, "check_arguments"):
                paper_parser.set_defaults(
                    check_arguments=_refusing(paper_parser, module.check_arguments)
                )
    return parser


def _import_command(module):
    """Imports a command's module after Keras, so that a missing backend is named."""
    import_keras()
    return importlib.import_module(module)


def _refusing(parser, check):
    """`check(args)`, with its `ValueError` turned into `parser`'s error (exit status 2)."""

    def checked(args):
        try:
            check(args)
        except ValueError as error:
            parser.error(str(error))

    return checked


def version():
    """The installed `keras-attn` version, or `"unknown (not installed)"`."""
    try:
        return importlib.metadata.version("keras-attn")
    except importlib.metadata.PackageNotFoundError:
        return "unknown (not installed)"


def main(argv=None):
    """Runs the command in `argv` (default `sys.argv[1:]`); returns the exit status."""
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["tour"] or (argv[:1] == ["reproduce"] and argv[1:2] in _papers()):
        problem = _missing_requirement(argv[0])
        if problem:
            print(problem, file=sys.stderr)
            return 1
    args = build_parser(argv).parse_args(argv)
    if hasattr(args, "check_arguments"):
        args.check_arguments(args)
    _announce(args)
    try:
        args.run(args)
    except DatasetNotFoundError as error:  # the message says how to install the data
        print(f"keras-attn {args.command}: {error}", file=sys.stderr)
        return 1
    return 0


def _papers():
    return [[name] for name in REPRODUCTIONS]


def _missing_requirement(command):
    """Says what to install when the `reproduce` extra is missing, else `None`.

    A missing backend is reported next, when the command's module is imported.
    """
    needed = missing_packages("reproduce")
    if needed:
        return (
            f'keras-attn {command} needs the "reproduce" extra; missing: {", ".join(needed)}. '
            'Install it with `pip install "keras-attn[reproduce]"`.'
        )
    return None


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


if __name__ == "__main__":
    sys.exit(main())
