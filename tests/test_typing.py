"""Every public function and class of the library has type annotations."""

import importlib
import inspect

import pytest

PACKAGES = (
    "analysis",
    "datasets",
    "distribution",
    "forecasting",
    "initializers",
    "layers",
    "losses",
    "metrics",
    "models",
    "pretrained",
    "pruning",
    "recommendation",
    "testing",
    "text",
    "utils",
)

# Keras' own hooks, which a layer overrides with Keras' signatures.
KERAS_HOOKS = {
    "build",
    "compute_mask",
    "compute_output_shape",
    "compute_output_spec",
    "from_config",
    "get_config",
}


def _public_callables(package):
    module = importlib.import_module(f"keras_attn.{package}")
    for name in module.__all__:
        value = getattr(module, name)
        if inspect.isclass(value):
            for attribute, member in vars(value).items():
                public = attribute in ("__init__", "call") or not attribute.startswith("_")
                if public and attribute not in KERAS_HOOKS and inspect.isfunction(member):
                    yield f"{name}.{attribute}", member
        elif inspect.isfunction(value):
            yield name, value


def _unannotated(function):
    """The parameters (and `return`) of `function` that have no annotation."""
    signature = inspect.signature(function)
    missing = [
        parameter.name
        for parameter in signature.parameters.values()
        if parameter.name not in ("self", "cls")
        and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        and parameter.annotation is inspect.Parameter.empty
    ]
    if function.__name__ != "__init__" and signature.return_annotation is inspect.Signature.empty:
        missing.append("return")
    return missing


@pytest.mark.parametrize("package", PACKAGES)
def test_every_public_callable_is_annotated(package):
    missing = {
        name: unannotated
        for name, function in _public_callables(package)
        if (unannotated := _unannotated(function))
    }
    assert missing == {}, f"keras_attn.{package}: unannotated parameters {missing}"
