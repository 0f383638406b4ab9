import ast
import importlib.util
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


KERNELS = LAYERS.parent / "kernels"
# The one module of each backend's native kernels, which alone imports it.
NATIVE_MODULES = {"_torch.py": "torch", "_jax.py": "jax", "_tensorflow.py": "tensorflow"}


def test_kernels_import_each_backend_in_its_own_module_only():
    files = sorted(KERNELS.rglob("*.py"))
    assert {path.name for path in files} >= set(NATIVE_MODULES)
    imported = {path.name: FORBIDDEN & set(_imported_roots(path)) for path in files}
    allowed = {
        name: {NATIVE_MODULES[name]} if name in NATIVE_MODULES else set() for name in imported
    }
    assert {
        name: roots - allowed[name] for name, roots in imported.items() if roots - allowed[name]
    } == {}
    assert imported["_torch.py"] == {"torch"} and imported["_jax.py"] == {"jax"}


PACKAGE = LAYERS.parent


def _keras_attn_imports(path):
    """`(module, names)` of each `from keras_attn... import names` in a file."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.ImportFrom)
            and node.module
            and node.module.startswith("keras_attn")
        ):
            yield node.module, [alias.name for alias in node.names]
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("keras_attn"):
                    yield alias.name, []


def _package_files():
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE)
        if len(relative.parts) > 1:
            yield relative.parts[0], path


# What utils may reach above it: the backend's operations, inside functions only (the
# kernels import utils), see `test_utils_reaches_the_kernels_inside_functions_only`.
BACKEND_OPERATIONS = "keras_attn.kernels.runtime"


def test_utils_is_the_floor():
    upward = {
        str(path.relative_to(PACKAGE)): module
        for package, path in _package_files()
        if package == "utils"
        for module, names in _keras_attn_imports(path)
        if module.split(".")[1] not in {"utils", "_typing", "_optional"}
        and BACKEND_OPERATIONS not in {module, *(f"{module}.{name}" for name in names)}
    }
    assert upward == {}


def test_utils_reaches_the_kernels_inside_functions_only():
    at_import = {
        str(path.relative_to(PACKAGE))
        for package, path in _package_files()
        if package == "utils"
        for node in ast.parse(path.read_text(encoding="utf-8")).body
        if isinstance(node, ast.Import | ast.ImportFrom)
        and any(name.startswith("keras_attn.kernels") for name in _statement_modules(node))
    }
    assert at_import == set()


def _statement_modules(node):
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    return [node.module or ""]


BACKENDS = FORBIDDEN | {"jaxlib"}
# The modules that alone import a backend: each backend's module of the kernels package,
# imported on that backend only (`keras_attn.kernels.runtime` reaches it).
BACKEND_MODULES = {f"kernels/{name}" for name in NATIVE_MODULES}


def _backends_imported(path):
    """The backends a file imports: statements, `import_module("...")` and `require("...")`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    roots = set(_imported_roots(path))
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", None))
            in {"import_module", "__import__", "require"}
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            roots.add(node.args[0].value.split(".")[0])
    return roots & BACKENDS


def test_only_the_backend_modules_import_a_backend():
    files = {str(path.relative_to(PACKAGE)): path for path in sorted(PACKAGE.rglob("*.py"))}
    assert set(files) >= BACKEND_MODULES and len(files) > 100
    offenders = {
        name: sorted(_backends_imported(path))
        for name, path in files.items()
        if name not in BACKEND_MODULES and _backends_imported(path)
    }
    assert offenders == {}


def test_the_deprecated_aliases_are_gone():
    for module in ("keras_attn.utils.macs", "keras_attn.models.adavit_fast_path"):
        assert importlib.util.find_spec(module) is None, module


def test_kernels_import_only_utils():
    upward = {
        str(path.relative_to(PACKAGE)): module
        for package, path in _package_files()
        if package == "kernels"
        for module, _ in _keras_attn_imports(path)
        if module.split(".")[1] not in {"kernels", "utils", "_typing", "_optional"}
    }
    assert upward == {}


def test_no_private_name_crosses_packages():
    offenders = []
    for package, path in _package_files():
        for module, names in _keras_attn_imports(path):
            parts = module.split(".")
            if len(parts) < 2 or parts[1] in {package, "_typing", "_optional"}:
                continue
            private = [part for part in parts[2:] if part.startswith("_")]
            private += [name for name in names if name.startswith("_")]
            if private:
                offenders.append((str(path.relative_to(PACKAGE)), module, private))
    assert offenders == []


def test_utils_exports_are_callable():
    from keras_attn import utils

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
