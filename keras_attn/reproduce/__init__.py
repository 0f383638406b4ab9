"""Paper reproductions run by `keras-attn reproduce NAME`.

Each module in this package is one reproduction. It defines `NAME` (the
subcommand), `HELP` (one line), `add_arguments(parser)` and `run(args)`,
where `args.out` is the output folder and `args.full` asks for the
documented full-size setting instead of the fast one.
"""

import importlib
import pkgutil


def available():
    """Maps each reproduction's `NAME` to its module."""
    modules = (
        importlib.import_module(f"{__name__}.{info.name}")
        for info in pkgutil.iter_modules(__path__)
        if not info.name.startswith("_")
    )
    return {module.NAME: module for module in modules}
