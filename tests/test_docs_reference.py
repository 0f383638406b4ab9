"""Every public name of keras_attn is in the docs reference, readable.

A docs page renders an object with a `::: path` directive. Like the docs
renderer, a path goes through a submodule before a package attribute of the
same name: `keras_attn.pruning.head_importance` is the module, not the
function that the package exports.
"""

import importlib
import importlib.util
import pathlib
import re

from tools import docs_api
from tools.griffe_keras import google_style

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
DIRECTIVE = re.compile(r"^::: (\S+)", re.MULTILINE)
# A cross-reference by identifier: [`name`][keras_attn.package.name].
LINK = re.compile(r"\]\[(keras_attn\.[\w.]+)\]")
# An item of a package list: the linked name, a colon and its summary.
LIST_ITEM = re.compile(r"^- \[`(?P<name>\w+)`\]\[(?P<path>[\w.]+)\](?P<rest>.*)$", re.MULTILINE)


def _public_names():
    """`(path, value)` for every name in a public package's `__all__`.

    Every public package counts: `keras_attn` itself and nested ones such as
    `keras_attn.models.adavit`.
    """
    return docs_api.public_paths()


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


def test_the_public_packages_include_the_top_and_the_nested_ones():
    paths = {path for path, _ in _public_names()}
    assert {
        "keras_attn.__version__",
        "keras_attn.analysis.topic_structure.take_off_step",
        "keras_attn.models.adavit.DECISION_KEYS",
    } <= paths


def test_every_name_of_the_package_lists_has_a_one_line_summary():
    items = list(LIST_ITEM.finditer((DOCS / "api.md").read_text()))
    assert len(items) > 150
    for item in items:
        summary = docs_api.summary(item["path"])
        assert item["rest"] == f": {summary}", item["name"]
        assert summary and "\n" not in summary


def test_a_name_links_to_its_shortest_public_path():
    from keras_attn import analysis, models, pruning

    assert docs_api.link_path(models.adavit, "AdaViT") == "keras_attn.models.AdaViT"
    assert docs_api.link_path(models.adavit, "DECISION_KEYS") == (
        "keras_attn.models.adavit.DECISION_KEYS"
    )
    # `MASK_ID` is 1, the same int object as any other 1: its own name decides.
    assert docs_api.link_path(analysis.topic_structure, "MASK_ID") == (
        "keras_attn.analysis.topic_structure.MASK_ID"
    )
    # The submodule `head_importance` comes before the function of that name.
    assert docs_api.link_path(pruning, "head_importance") == (
        "keras_attn.pruning.head_importance.head_importance"
    )


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
