"""The `jit_compile` setting that keeps a short training test fast on each backend."""

import keras


def quick_jit_compile() -> bool:
    """`jit_compile` for a test that trains a few steps, where the arithmetic is the subject.

    `True` on JAX, whose eager steps are slow; `False` on TensorFlow, where
    a traced graph is ready sooner than XLA compiles one, and on torch,
    where `True` means minutes of `torch.compile`. Tests of XLA itself pass
    `jit_compile=True` instead.

    Returns:
        bool, for `Model.compile(jit_compile=...)` or a training helper's
        `jit_compile` argument.

    Example:

    >>> quick_jit_compile() == (keras.backend.backend() == "jax")
    True
    """
    return keras.backend.backend() == "jax"
