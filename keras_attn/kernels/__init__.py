"""Attention kernels: the arithmetic of the attention core, per backend.

Functions of projected queries, keys and values, `(batch, length, heads,
head_dim)`, and boolean masks: `dense_attention` (with a causal mask, and
for the last positions only), `blockwise_attention` (dense or causal, an
online softmax over blocks), `offset_attention` (keys at fixed backward
offsets, such as LogSparse and causal windows) and `gathered_attention`
(any pattern of key slots). `MultiHeadSelfAttention` projects, builds the
masks and chooses the kernel; the kernels compute.

Each kernel has a `keras.ops` reference implementation, which is its
definition and runs on every backend and in every export. A backend may
add a native implementation, chosen by `implementation="auto"` (the
default) where it applies:

- `dense_attention`: torch's `scaled_dot_product_attention`, JAX's
  `jax.nn.dot_product_attention` and TensorFlow's XLA-compiled
  `keras.ops.dot_product_attention`;
- `offset_attention`: on torch, in-place fused multiply-adds into
  preallocated buffers; on JAX, slot-major loops written for XLA on the
  CPU (logits written in place, a softmax over the slots whose sums are
  products with ones).

`implementation="reference"` forces the reference, and
`implementation="native"` the native one (a `ValueError` where none can
run). On torch the native implementations run eagerly; a model being
traced or compiled (an ONNX or SavedModel export, `torch.compile`) runs the
references. Each native implementation equals its reference to 1e-5 in
float32, outputs and gradients (tests/kernels).

`keras_attn.kernels.runtime` holds what the rest of the library asks of
the backend beyond `keras.ops` (gradients, graph assertions, compiled
functions, threads, devices), dispatched to the same per-backend modules:
outside this package the library imports no backend.
"""

from keras_attn.kernels._shared import native_kernel
from keras_attn.kernels.blockwise import blockwise_attention
from keras_attn.kernels.dense import dense_attention
from keras_attn.kernels.sparse import gather_positions, gathered_attention, offset_attention

NATIVE_KERNELS = ("dense_attention", "offset_attention")


def has_native(kernel: str) -> bool:
    """Whether `kernel` has a native implementation that can run here and now.

    Args:
        kernel: `"dense_attention"` or `"offset_attention"`.

    Returns:
        `True` on a backend with a native implementation of `kernel`,
        unless torch is tracing or compiling a model (its references run
        then).

    Example:

    >>> from keras_attn import kernels
    >>> kernels.has_native("offset_attention") == (keras.backend.backend() in ("torch", "jax"))
    True
    """
    if kernel not in NATIVE_KERNELS:
        raise ValueError(f"`kernel` must be one of {NATIVE_KERNELS}. Received: kernel={kernel!r}")
    return native_kernel(kernel, "auto") is not None


__all__ = [
    "blockwise_attention",
    "dense_attention",
    "gather_positions",
    "gathered_attention",
    "has_native",
    "offset_attention",
]
