import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.skipif(
    importlib.util.find_spec("jax") is None or os.environ.get("KERAS_BACKEND") == "jax",
    reason="needs jax installed (`pip install -e .[jax]`); already on JAX",
)
def test_layer_tests_pass_on_the_jax_backend():
    """Runs every `backend_agnostic` layer test again with KERAS_BACKEND=jax."""
    env = {**os.environ, "KERAS_BACKEND": "jax"}
    command = [sys.executable, "-m", "pytest", "-q", "-m", "backend_agnostic", "-o", "addopts="]
    command += ["-p", "no:nbmake", "-p", "no:cacheprovider", "tests/layers"]
    result = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stdout[-5000:]
    assert " passed" in result.stdout
