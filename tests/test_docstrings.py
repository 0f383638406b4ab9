"""The `>>>` examples of the docstrings run as tests (TensorFlow backend).

Outputs are compared like TensorFlow's own doctests do: numbers within a
relative `1e-3` (so float32 rounding does not matter) and a `TensorShape`
read as the tuple it prints in the docs.
"""

import doctest
import importlib
import pkgutil
import re

import keras
import numpy as np
import pytest

import keras_attn

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(keras_attn.__path__, "keras_attn.")
    if not info.name.endswith("__main__")
)
# Examples known to be wrong, each with the reason; strict, so a fix is noticed.
KNOWN_BROKEN = {}
NUMBER = re.compile(r"-?\d+\.?\d*(?:e[-+]?\d+)?")


class _Checker(doctest.OutputChecker):
    def check_output(self, want, got, optionflags):
        got = re.sub(r"TensorShape\(\[([^\]]*)\]\)", lambda m: _as_tuple(m.group(1)), got)
        if super().check_output(want, got, optionflags):
            return True
        want_numbers, got_numbers = NUMBER.findall(want), NUMBER.findall(got)
        same_text = NUMBER.sub("#", want).split() == NUMBER.sub("#", got).split()
        return (
            same_text
            and len(want_numbers) == len(got_numbers)
            and np.allclose(
                [float(x) for x in got_numbers], [float(x) for x in want_numbers], rtol=1e-3
            )
        )


def _public_names():
    """`keras`, `np` and the public layers and models, in scope as in the docs."""
    names = {"keras": keras, "np": np}
    for package in ("layers", "models"):
        package = importlib.import_module(f"keras_attn.{package}")
        names.update({name: getattr(package, name) for name in package.__all__})
    return names


def _as_tuple(sizes):
    items = [item.strip() for item in sizes.split(",") if item.strip()]
    return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"


@pytest.mark.parametrize(
    "name",
    [
        pytest.param(name, marks=pytest.mark.xfail(reason=KNOWN_BROKEN[name], strict=True))
        if name in KNOWN_BROKEN
        else name
        for name in MODULES
    ],
)
def test_docstring_examples(name):
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(
        checker=_Checker(), optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE
    )
    tests = [t for t in finder.find(module, extraglobs=_public_names()) if t.examples]
    if not tests:
        pytest.skip("No examples.")
    for test in tests:
        keras.utils.set_random_seed(0)
        runner.run(test)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed in {name}"
