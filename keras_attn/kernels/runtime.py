"""What the library asks of the backend beyond `keras.ops`.

Gradients, graph assertions, compiled functions, compute threads, devices
and TensorFlow's data and SavedModel runtimes. Each function runs the
current backend's implementation, from that backend's module of this
package (`_tensorflow`, `_jax` or `_torch`, imported on that backend only,
see `_shared.backend_module`), or a backend-neutral default where the
backend needs none. Outside this package the library imports no backend.
"""

import importlib

import keras

from keras_attn.kernels._shared import NATIVE_MODULES, backend_module


def _implementation(name, default=None, needs=None, purpose=None):
    """The current backend's function `name`, else `default`.

    Without either, a `ValueError` says that `purpose` needs one of the
    backends `needs`.
    """
    found = getattr(backend_module(), name, None) or default
    if found is None:
        raise ValueError(
            f"{purpose} needs the {needs} backend. Received: backend={keras.backend.backend()!r}"
        )
    return found


def gradients(loss, inputs, purpose="Differentiation"):
    """The gradients of `loss` at `inputs`, with the backend's own autodiff.

    Args:
        loss: function of the tensors `inputs`, returning `(total, aux)`:
            the scalar to differentiate and anything else to return.
        inputs: tensors or arrays.
        purpose: what the error on a backend without autodiff names.

    Returns:
        `(gradients, aux)`: one gradient per input (zeros for an input that
        does not reach `total`) and the `aux` of the differentiated call.
    """
    inputs = [keras.ops.convert_to_tensor(x) for x in inputs]
    return _implementation("gradients", needs="TensorFlow, JAX or torch", purpose=purpose)(
        loss, inputs
    )


def assert_in_graph(condition, message, tensor):
    """`tensor`, after an assertion of `condition` that fails with `message()` when run.

    A graph assertion on TensorFlow (XLA drops it); elsewhere `tensor`
    unchanged. `message`, a function returning a list of strings and
    tensors, called only where the assertion is made.
    """
    return _implementation("assert_in_graph", default=lambda condition, message, tensor: tensor)(
        condition, message, tensor
    )


def dropout(inputs, rate, seed_generator):
    """`keras.random.dropout(inputs, rate, seed=seed_generator)`, drawn fast under XLA.

    The same numbers on every backend. On TensorFlow the Philox generator
    is named rather than left to `auto_select` (which picks Philox on CPU
    and GPU): XLA on CPU then draws the mask about 30 times faster when no
    other random draw of the step has its shape (with `auto_select` it
    recomputes the generator's key for every number, about 350 ns each).

    Args:
        inputs: tensor to drop from.
        rate: float in `(0, 1)`, the fraction of entries set to zero.
        seed_generator: the `keras.random.SeedGenerator` that draws the
            seed (the state a `keras.layers.Dropout` keeps).

    Returns:
        `inputs` with entries zeroed at `rate`, the others scaled by
        `1 / (1 - rate)`.
    """
    return _implementation("dropout", default=_keras_dropout)(inputs, rate, seed_generator)


def _keras_dropout(inputs, rate, seed_generator):
    return keras.random.dropout(inputs, rate, seed=seed_generator)


def graph_function(function, **options):
    """`function` as a `tf.function(function, **options)` on TensorFlow, else unchanged."""
    return _implementation("graph_function", default=lambda function, **options: function)(
        function, **options
    )


def without_gradients(function):
    """`function`, run without recording gradients (`torch.no_grad` on torch)."""
    return _implementation("without_gradients", default=lambda function: function)(function)


def xla_compiled(function, purpose="XLA compilation"):
    """`function` compiled by XLA: `tf.function(jit_compile=True)`, or `jax.jit`.

    On JAX, `function` must be pure (variables passed in, as with
    `stateless_call`). A `ValueError` naming `purpose` on torch.
    """
    return _implementation("xla_compiled", needs="TensorFlow or JAX", purpose=purpose)(function)


def compiled_gradient(loss, *arguments):
    """XLA's compiled, never run, gradient of `loss` at `arguments` (JAX only)."""
    return _implementation("compiled_gradient", needs="JAX", purpose="`compiled_gradient`")(
        loss, *arguments
    )


def use_one_thread():
    """Limits this process to one compute thread (TensorFlow, torch), before its first op."""
    _implementation("use_one_thread", default=lambda: None)()


def training_devices():
    """The devices Keras trains on, as `keras.distribution.list_devices` names them.

    Keras's distribution API lists no devices on torch, so there they are
    torch's: its GPUs, else the CPU.
    """
    return _implementation("training_devices", default=keras.distribution.list_devices)()


def ordered_dataset(x, y, batch_size):
    """A `tf.data` dataset of `(x, y)` in order, in batches, with autotuning off (TensorFlow)."""
    return _implementation("ordered_dataset", needs="TensorFlow", purpose="`ordered_dataset`")(
        x, y, batch_size
    )


def training_step_hlo(model, loss, x, y):
    """The XLA HLO text of `model`'s training step (forward, `loss`, gradients), on TensorFlow.

    Raises where XLA cannot compile an op of the step.
    """
    return _implementation("training_step_hlo", needs="TensorFlow", purpose="`training_step_hlo`")(
        model, loss, x, y
    )


def load_saved_model(path):
    """The SavedModel at `path`, loaded by TensorFlow, which serves it on every backend."""
    return importlib.import_module(NATIVE_MODULES["tensorflow"]).load_saved_model(path)
