"""The JAX implementations of the attention kernels and of `runtime`.

Imported on the JAX backend only (see `_shared.native_kernel`), so that an
install without JAX imports the library.
"""

import jax
import jax.numpy as jnp


def tracing():
    """Never: `jax.nn.dot_product_attention` traces under `jit` and every exporter."""
    return False


def dense_attention(query, key, value, mask, *, scale, causal):
    """`jax.nn.dot_product_attention`: cuDNN's fused kernel on a GPU where it applies, else XLA.

    A row with no visible key gets finite weights (JAX masks with a large
    negative number); the caller sets its output to zero.
    """
    mask = None if mask is None else jnp.asarray(mask, bool)  # (batch, 1, queries or 1, length)
    arguments = {"mask": mask, "scale": scale, "is_causal": causal}
    if jax.devices()[0].platform == "gpu":
        try:  # cuDNN takes some dtypes, head sizes and masks only; it says so when traced
            return jax.nn.dot_product_attention(
                query, key, value, implementation="cudnn", **arguments
            )
        except (ValueError, NotImplementedError, RuntimeError):
            pass
    return jax.nn.dot_product_attention(
        query, key, value, implementation="xla", **arguments
    )  # (batch, queries, heads, value_dim)


NATIVE = {"dense_attention": dense_attention}


def gradients(loss, inputs):
    """`runtime.gradients` with `jax.grad`."""
    grads, aux = jax.grad(loss, argnums=tuple(range(len(inputs))), has_aux=True)(*inputs)
    return list(grads), aux


def xla_compiled(function):
    """`runtime.xla_compiled`: `jax.jit`."""
    return jax.jit(function)


def compiled_gradient(loss, *arguments):
    """`runtime.compiled_gradient`: `jax.grad(loss)` lowered and compiled by XLA."""
    return jax.jit(jax.grad(loss)).lower(*arguments).compile()
