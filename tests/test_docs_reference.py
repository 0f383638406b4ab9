"""Every public name of keras_attn is in the docs reference, readable.

A docs page renders an object with a `::: path` directive. Like the docs
renderer, a path goes through a submodule before a package attribute of the
same name: `keras_attn.pruning.head_importance` is the module, not the
function that the package exports.
"""

import importlib
import importlib.util
import pathlib
import pkgutil
import re

import keras_attn
from tools.griffe_keras import google_style

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
DIRECTIVE = re.compile(r"^::: (\S+)", re.MULTILINE)
# A cross-reference by identifier: [`name`][keras_attn.package.name].
LINK = re.compile(r"\]\[(keras_attn\.[\w.]+)\]")


def _public_names():
    """`(path, value)` for every name in a public package's `__all__`."""
    for info in pkgutil.iter_modules(keras_attn.__path__, "keras_attn."):
        if info.ispkg:
            package = importlib.import_module(info.name)
            for name in getattr(package, "__all__", ()):
                yield f"{info.name}.{name}", getattr(package, name)


def _rendered(path):
    """The object that the docs render for the dotted `path`."""
    parts = path.split(".")
    value = importlib.import_module(parts[0])
    for end in range(2, len(parts) + 1):
        prefix = ".".join(parts[:end])
        if hasattr(value, "__path__") and importlib.util.find_spec(prefix) is not None:
            value = importlib.import_module(prefix)
        else:
            value = getattr(value, parts[end - 1])
    return value


def _missing(paths):
    objects = [_rendered(path) for path in paths]
    return [name for name, value in _public_names() if not any(value is obj for obj in objects)]


def test_every_public_name_is_rendered_on_a_page():
    paths = [path for page in DOCS.glob("*.md") for path in DIRECTIVE.findall(page.read_text())]
    assert _missing(paths) == []


def test_the_packages_page_links_every_public_name():
    assert _missing(LINK.findall((DOCS / "api.md").read_text())) == []


def test_a_keras_example_and_call_arguments_read_as_google_style():
    keras_style = "\n".join(
        [
            "Doubles.",
            "",
            "Call arguments:",
            "    inputs: a tensor.",
            "",
            "Example:",
            "",
            ">>> double(1)",
            "2",
            "",
            "```python",
            "Note: not a section",
            "```",
            "",
            "References:",
            "    - A paper.",
        ]
    )
    google = "\n".join(
        [
            "Doubles.",
            "",
            "Other arguments: Call arguments",
            "    inputs: a tensor.",
            "",
            "Examples:",
            "    >>> double(1)",
            "    2",
            "",
            "    ```python",
            "    Note: not a section",
            "    ```",
            "",
            "References:",
            "    - A paper.",
        ]
    )
    assert google_style(keras_style) == google
    assert google_style(google) == google
