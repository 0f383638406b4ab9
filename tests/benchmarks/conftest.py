import pytest

from tools.benchmark_scripts import load_benchmark as load


@pytest.fixture
def load_benchmark():
    """Loads `benchmarks/NAME.py` (a script, not a package module) as a module."""
    return load
