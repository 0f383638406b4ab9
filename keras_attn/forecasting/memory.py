"""Planned memory of a forecaster's attention layer, and the windows a budget allows.

The LogSparse paper's central claim is about a memory budget: full attention
needs `O(L²)` memory per layer, LogSparse `O(L log L)`, so for the same
memory LogSparse sees a longer history. These functions turn that claim into
window lengths: XLA's buffer assignment of one attention layer's training
step (forward and backward, weight gradients) is the planned memory, read
from JAX's `compiled.memory_analysis()` (temporaries + arguments + outputs)
without running the step, and the longest window whose plan fits the budget
is chosen. Under another backend the plan is made by JAX in a subprocess, so
JAX must be installed (`pip install "keras-attn[jax]"`).

Run as `python -m keras_attn.forecasting.memory FUNCTION '<json request>'`
(JAX backend), the module prints the function's result as JSON: the
subprocess path.
"""

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Mapping
from typing import Any, Literal

LAYER_DEFAULTS = {"variant": "local", "local_window": 8, "kernel_size": 9}
"""Layer arguments of `windows_within_budget` that a layer dict may leave out."""


def planned_attention_bytes(
    lengths: Iterable[int],
    attention: Literal["full", "logsparse"],
    hidden_dim: int,
    num_heads: int,
    *,
    variant: Literal["pure", "local", "restart"] = "local",
    local_window: int = 8,
    kernel_size: int = 9,
    batch_size: int = 1,
    budget_bytes: int | None = None,
) -> dict[int, int]:
    """XLA's planned peak bytes of one attention layer's training step, per length.

    The layer is the one `keras_attn.models.build_logsparse_forecaster`
    builds with the same arguments. The step is the gradient of
    `sum(output²)` with respect to the layer's weights on a
    `(batch_size, length, hidden_dim)` input, compiled with `jax.jit`; its plan is
    temporaries + arguments + outputs − aliased bytes (`planned_peak_bytes`).
    Nothing is run.

    With `budget_bytes`, only the lengths a bisection needs are planned
    (the plan grows with the length): the result then holds the longest
    length within the budget and the shortest one above it (where they
    exist), which is all `longest_window_within` needs.

    Args:
        lengths: iterable of int window lengths.
        attention: `"full"` or `"logsparse"`.
        hidden_dim: int, model width.
        num_heads: int, attention heads.
        variant: LogSparse variant (`"pure"`, `"local"`, `"restart"`).
        local_window: dense window of the `"local"` variant.
        kernel_size: int, kernel of the query/key convolution.
        batch_size: int, windows per training step.
        budget_bytes: optional int; plan by bisection against it.

    Returns:
        dict `length -> planned bytes` (int), for every length or, with
        `budget_bytes`, for the lengths the bisection planned.

    Example:

    ```python
    plans = planned_attention_bytes([96, 192], "full", hidden_dim=16, num_heads=4, batch_size=64)
    ```
    """
    request = {
        "lengths": [int(length) for length in lengths],
        "attention": attention,
        "hidden_dim": hidden_dim,
        "num_heads": num_heads,
        "variant": variant,
        "local_window": local_window,
        "kernel_size": kernel_size,
        "batch_size": batch_size,
        "budget_bytes": budget_bytes,
    }
    return _int_keys(_in_jax("_plan", request))


def windows_within_budget(
    reference_length: int,
    reference_layer: Mapping[str, Any],
    lengths: Iterable[int],
    layers: Mapping[str, Mapping[str, Any]],
    *,
    hidden_dim: int,
    num_heads: int,
    batch_size: int = 1,
) -> dict[str, Any]:
    """A memory budget and the longest window each layer's plan fits in it.

    The budget is the plan (`planned_attention_bytes`) of `reference_layer`
    at `reference_length`, for example full attention at 96 steps; each of
    `layers` then gets the longest of `lengths` whose plan is within it,
    found by bisection. One JAX process makes every plan.

    Args:
        reference_length: int, the window that sets the budget.
        reference_layer: dict of the layer arguments of
            `planned_attention_bytes` (`attention`, and optionally `variant`,
            `local_window`, `kernel_size`).
        lengths: iterable of int candidate windows.
        layers: dict `name -> layer arguments`, as `reference_layer`.
        hidden_dim: int, model width.
        num_heads: int, attention heads.
        batch_size: int, windows per training step.

    Returns:
        dict with `"budget_bytes"` and `"models"`: `name -> {"window",
        "planned_bytes", "plans"}`, `plans` the planned candidates
        (`length -> bytes`).

    Raises:
        ValueError: if no candidate of a layer fits the budget.

    Example:

    ```python
    budget = windows_within_budget(
        96,
        {"attention": "full"},
        range(48, 700, 24),
        {"logsparse": {"attention": "logsparse", "local_window": 8}},
        hidden_dim=16,
        num_heads=4,
        batch_size=64,
    )
    budget["models"]["logsparse"]["window"]  # the longest window within the budget
    ```
    """
    request = {
        "reference_length": int(reference_length),
        "reference_layer": reference_layer,
        "lengths": [int(length) for length in lengths],
        "layers": layers,
        "sizes": {"hidden_dim": hidden_dim, "num_heads": num_heads, "batch_size": batch_size},
    }
    budget = _in_jax("_budget", request)
    for chosen in budget["models"].values():
        chosen["plans"] = _int_keys(chosen["plans"])
    return budget


def longest_window_within(budget_bytes: int, plans: Mapping[int, int]) -> int:
    """The longest length whose plan is at most `budget_bytes`.

    Args:
        budget_bytes: int, the memory budget.
        plans: dict `length -> planned bytes`, as from `planned_attention_bytes`.

    Returns:
        int, the longest such length.

    Raises:
        ValueError: if no length fits.

    Example:

    >>> longest_window_within(100, {24: 40, 48: 90, 72: 150})
    48
    """
    fitting = [length for length, planned in plans.items() if planned <= budget_bytes]
    if not fitting:
        raise ValueError(
            f"No window fits the budget; the smallest plan is {min(plans.values())} bytes. "
            f"Received: budget_bytes={budget_bytes}"
        )
    return max(fitting)


def _budget(reference_length, reference_layer, lengths, layers, sizes):
    reference = {**LAYER_DEFAULTS, **reference_layer, **sizes}
    budget_bytes = _plan_one(reference_length, **reference)
    models = {}
    for name, layer in layers.items():
        plans = _plan(lengths, budget_bytes, **{**LAYER_DEFAULTS, **layer, **sizes})
        window = longest_window_within(budget_bytes, plans)
        models[name] = {"window": window, "planned_bytes": plans[window], "plans": plans}
    return {"budget_bytes": budget_bytes, "models": models}


def _plan(lengths, budget_bytes=None, **layer_arguments):
    """Plans every length, or bisects the sorted lengths against `budget_bytes`."""
    if budget_bytes is None:
        return {length: _plan_one(length, **layer_arguments) for length in lengths}
    lengths, plans = sorted(lengths), {}
    low, high = 0, len(lengths) - 1  # lengths before `low` fit, after `high` do not
    while low <= high:
        middle = (low + high) // 2
        plans[lengths[middle]] = _plan_one(lengths[middle], **layer_arguments)
        if plans[lengths[middle]] <= budget_bytes:
            low = middle + 1
        else:
            high = middle - 1
    return plans


def _plan_one(
    length, attention, hidden_dim, num_heads, variant, local_window, kernel_size, batch_size
):
    import keras

    from keras_attn.kernels import runtime
    from keras_attn.models.logsparse_forecaster import forecaster_attention

    key_dim = hidden_dim // num_heads
    layer = forecaster_attention(
        attention, key_dim, num_heads, variant, local_window, None, kernel_size
    )
    x = keras.ops.ones((batch_size, length, hidden_dim))  # (batch, length, hidden_dim)
    layer(x[:, :8])
    weights = [variable.value for variable in layer.trainable_variables]

    def loss(weights, x):
        return keras.ops.sum(keras.ops.square(layer.stateless_call(weights, [], x)[0]))

    return planned_peak_bytes(runtime.compiled_gradient(loss, weights, x))


def planned_peak_bytes(compiled: Any) -> int:
    """XLA's planned peak bytes of a compiled JAX function.

    Temporaries + arguments + outputs − aliased bytes of its buffer
    assignment (`compiled.memory_analysis()`); nothing is run.

    Args:
        compiled: the result of `jax.jit(f).lower(...).compile()`.

    Returns:
        int, bytes.
    """
    analysis = compiled.memory_analysis()
    return (
        analysis.temp_size_in_bytes
        + analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        - analysis.alias_size_in_bytes
    )


def _int_keys(plans):
    return {int(length): int(planned) for length, planned in plans.items()}


def _in_jax(function, request):
    """`function(**request)` of this module, in a JAX subprocess under another backend."""
    import keras

    if keras.backend.backend() == "jax":
        return globals()[function](**request)
    # The subprocess imports this copy of the package, wherever it is run from.
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "2", "PYTHONPATH": path}
    command = [sys.executable, "-m", __name__, function, json.dumps(request)]
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    if result.returncode != 0 or not lines:
        tail = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        raise RuntimeError(
            f'Planning attention memory needs JAX (`pip install "keras-attn[jax]"`): {tail[0]}'
        )
    return json.loads(lines[-1])


if __name__ == "__main__":
    print(json.dumps(globals()[sys.argv[1]](**json.loads(sys.argv[2]))))
