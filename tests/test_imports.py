import ast
import json
import pathlib

import keras_attn

LAYERS = pathlib.Path(keras_attn.__file__).parent / "layers"
FORBIDDEN = {"tensorflow", "jax", "torch"}


def _imported_roots(path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module.split(".")[0]


def test_layers_import_no_backend():
    files = sorted(LAYERS.rglob("*.py"))
    assert files
    offenders = {
        str(path.relative_to(LAYERS)): sorted(FORBIDDEN & set(_imported_roots(path)))
        for path in files
    }
    assert {k: v for k, v in offenders.items() if v} == {}


def test_utils_lists_every_lazy_export():
    from keras_attn import utils

    assert sorted(utils.__all__) == sorted(utils._EXPORTS)
    assert all(callable(getattr(utils, name)) for name in utils.__all__)


REPOSITORY = pathlib.Path(__file__).parents[1]


def _code(path):
    if path.suffix != ".ipynb":
        return path.read_text(encoding="utf-8")
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")


def _imports_a_reproduction(path):
    tree = ast.parse(_code(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            names = [f"{node.module}.{alias.name}" for alias in node.names]
        else:
            continue
        if any(name.startswith("keras_attn.reproduce") for name in names):
            return True
    return False


def test_notebooks_and_benchmarks_import_the_library_not_the_reproductions():
    files = sorted(REPOSITORY.glob("notebooks/*.ipynb")) + sorted(
        REPOSITORY.glob("benchmarks/*.py")
    )
    assert len(files) > 10
    offenders = {str(p.relative_to(REPOSITORY)) for p in files if _imports_a_reproduction(p)}
    assert offenders == set()
