import importlib.util
import pathlib

import pytest

BENCHMARKS = pathlib.Path(__file__).resolve().parents[2] / "benchmarks"


@pytest.fixture
def load_benchmark():
    """Loads `benchmarks/NAME.py` (a script, not a package module) as a module."""

    def load(name):
        path = BENCHMARKS / f"{name}.py"
        spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module

    return load
