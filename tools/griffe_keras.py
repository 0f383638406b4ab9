"""Reads the Keras-style docstrings of keras_attn for the docs reference.

Keras writes a docstring's example unindented below `Example:` and documents
what `call` takes under `Call arguments:`. The Google-style parser of the
docs knows neither section, so `KerasDocstrings`, a griffe extension listed
in `mkdocs.yml`, rewrites each docstring before it is parsed: the example is
indented under `Examples:`, so its `>>>` lines render as code, and
`Call arguments:` becomes an arguments section of that title, rendered as a
list like `Args:`. The library's docstrings stay as Keras writes them.
"""

import re

import griffe

# A section title at the start of a line, such as `References:`.
SECTION_TITLE = re.compile(r"^[A-Z][\w ]*:$")
EXAMPLE_TITLES = ("Example:", "Examples:")
# Google style's title for a section of arguments, followed by its shown title.
CALL_ARGUMENTS = "Other arguments: Call arguments"


def _example_end(lines, start):
    """The index of the first line after the unindented example at `start`."""
    in_fence = False
    for index in range(start, len(lines)):
        line = lines[index]
        if line.startswith("```"):
            in_fence = not in_fence
        elif not in_fence and SECTION_TITLE.match(line) and not lines[index - 1].strip():
            return index - 1  # the blank line above the next section stays outside
    return len(lines)


def google_style(text):
    """`text`, a dedented Keras-style docstring, rewritten in Google style.

    Args:
        text: str, the docstring without its common indentation.

    Returns:
        The docstring with its example indented under `Examples:` and its
        `Call arguments:` section read as arguments.

    Example:

    >>> print(google_style("Sum.\\n\\nExample:\\n\\n>>> 1 + 1\\n2"))
    Sum.
    <BLANKLINE>
    Examples:
        >>> 1 + 1
        2
    """
    lines = text.split("\n")
    result = []
    index = 0
    while index < len(lines):
        line = lines[index]
        index += 1
        if line == "Call arguments:":
            result.append(CALL_ARGUMENTS)
        elif line in EXAMPLE_TITLES:
            result.append("Examples:")
            while index < len(lines) and not lines[index].strip():
                index += 1  # Google style wants the example right below its title
            if index < len(lines) and not lines[index].startswith(" "):
                end = _example_end(lines, index)
                result.extend(f"    {item}" if item.strip() else "" for item in lines[index:end])
                index = end
        else:
            result.append(line)
    return "\n".join(result)


class KerasDocstrings(griffe.Extension):
    """Rewrites every docstring in Google style before the docs parse it."""

    def on_object(self, *, obj, **kwargs):
        if not obj.is_alias and obj.docstring is not None:
            obj.docstring.value = google_style(obj.docstring.value)
