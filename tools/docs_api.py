"""The package lists of the API reference page, from the packages themselves.

A `<!-- results:package PACKAGE -->` marker of `docs_tables` lists every name
of `PACKAGE.__all__`, each linked to its reference and followed by the first
paragraph of its docstring, as the docs renderer (griffe) reads it: the
docstring of a function or class, or the string below a constant. A public
name without a docstring is an error, so the list never shows a bare name.

A name links to its shortest public path: `keras_attn.models.AdaViT` rather
than `keras_attn.models.adavit.AdaViT`. As the docs renderer does, a path goes
through a submodule before a package attribute of the same name: the function
`head_importance` that `keras_attn.pruning` exports links to
`keras_attn.pruning.head_importance.head_importance`.
"""

import functools
import importlib
import importlib.util
import inspect
import pkgutil

import griffe

import keras_attn
from tools.docs_tables import ROOT


def public_packages():
    """Every public package of keras_attn with an `__all__`, the top one first."""
    packages = [keras_attn]
    for info in pkgutil.walk_packages(keras_attn.__path__, "keras_attn."):
        if info.ispkg and not any(part.startswith("_") for part in info.name.split(".")):
            package = importlib.import_module(info.name)
            if hasattr(package, "__all__"):
                packages.append(package)
    return packages


@functools.cache
def public_paths():
    """`(path, value)` of every name in a public package's `__all__`."""
    return [
        (_path(package.__name__, name, getattr(package, name)), getattr(package, name))
        for package in public_packages()
        for name in package.__all__
    ]


def _path(package, name, value):
    """The path of `package`'s export `name`, through a submodule of that name."""
    path = f"{package}.{name}"
    shadowed = not inspect.ismodule(value) and importlib.util.find_spec(path) is not None
    return f"{path}.{name}" if shadowed else path


def link_path(package, name):
    """The shortest public path of `package`'s export `name` (the first of equal length).

    Another path counts when it exports the same object under the same name:
    two constants that happen to be the same small int are not one name.
    """
    value = getattr(package, name)
    paths = [
        path
        for path, candidate in public_paths()
        if candidate is value and path.rsplit(".", 1)[-1] == name
    ]
    return min(paths, key=lambda path: path.count("."))


# Names whose definition carries no docstring.
SUMMARIES = {
    "keras_attn.__version__": "The installed version of keras_attn, a string such as `0.1.0`.",
}


@functools.cache
def _loaded():
    return griffe.load("keras_attn", search_paths=[ROOT], resolve_aliases=True)


def summary(path):
    """The first paragraph of the docstring of `path`, on one line."""
    if path in SUMMARIES:
        return SUMMARIES[path]
    docstring = _loaded()[path.removeprefix("keras_attn.")].docstring
    if docstring is None or not docstring.value.strip():
        raise ValueError(f"`{path}` has no docstring for the package list.")
    return " ".join(docstring.value.strip().split("\n\n")[0].split())


def package_list(package_name):
    """The markdown list of `package_name`'s exports, each with its summary."""
    package = importlib.import_module(package_name)
    lines = []
    for name in sorted(package.__all__):
        path = link_path(package, name)
        lines.append(f"- [`{name}`][{path}]: {summary(path)}")
    return "\n".join(lines)
