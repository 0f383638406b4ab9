"""keras_attn: self-attention layers, initializers, models and analysis tools for Keras 3.

Importing `keras_attn` imports Keras and registers every serializable class
(layers, initializers, losses, metrics, the AdaViT model and the converter's
block) with it, so a
`.keras` file that uses them loads with `keras.saving.load_model` after a
plain `import keras_attn`.

The command line (`keras-attn`, `python -m keras_attn`, and the other
`python -m keras_attn...` modules) is the exception: it imports Keras only
for a command that needs it, so `keras-attn --help` and `--version` answer
without importing Keras or a backend. A subpackage is then imported on first
use, like `keras_attn.layers`.
"""

import importlib
import pathlib
import sys

from keras_attn._optional import import_keras

__version__ = "0.1.0"

_SUBPACKAGES = (
    "distribution",
    "initializers",
    "interop",
    "layers",
    "losses",
    "metrics",
    "models",
)


def _import_subpackages():
    import_keras()  # names the installed backends when the one Keras is set to is missing
    for name in _SUBPACKAGES:
        importlib.import_module(f"{__name__}.{name}")


def __getattr__(name):
    """Imports a subpackage on first use, when the command line skipped the eager import."""
    if name not in _SUBPACKAGES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    _import_subpackages()
    return globals()[name]


def _runs_the_command_line():
    """Whether Python was started as `keras-attn` or `python -m keras_attn...`.

    While `python -m` imports the module it runs, `sys.argv[0]` is `"-m"`;
    the module's name is then in `sys.orig_argv`.
    """
    if pathlib.PurePath(sys.argv[0] if sys.argv else "").name == "keras-attn":
        return True
    if sys.argv[:1] != ["-m"]:
        return False
    arguments = iter(sys.orig_argv[1:])
    for argument in arguments:
        if argument.startswith("-m"):
            module = argument[2:] or next(arguments, "")
            return module.split(".")[0] == __name__
    return False


if not _runs_the_command_line():
    _import_subpackages()

__all__ = [*_SUBPACKAGES, "__version__"]
