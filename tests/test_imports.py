import ast
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
