"""Mimetic initialization of self-attention (Trockman & Kolter, ICML 2023).

Paper: "Mimetic Initialization of Self-Attention Layers",
https://arxiv.org/abs/2305.09828. Fresh attention weights are set so that,
per head, `W_q W_kᵀ ≈ α1·Z1 + β1·I` and, over all heads together,
`W_v W_o = α2·Z2 − β2·I`, where `Z` has i.i.d. `N(0, 1/d)` entries: the
structure seen in the attention weights of pretrained transformers.
"""

import math

import keras
import numpy as np

from keras_attn._typing import Tensor

ROLES = ("query", "key", "value", "output")
# Streams of the seed sequence: one for the query/key pair, one for value/output.
QUERY_KEY_STREAM, VALUE_OUTPUT_STREAM = 0, 1


@keras.saving.register_keras_serializable(package="keras_attn")
class MimeticInitializer(keras.initializers.Initializer):
    """Mimetic initializer of the query/key and value/output kernels.

    The four kernels of an attention layer are made jointly: the query and
    key kernels are the two factors of one matrix per head, the value and
    output kernels the two factors of one matrix for the layer. The object
    built by the user holds the shared settings (`alpha1`, `beta1`, `alpha2`,
    `beta2`, `seed`); its members `.query()`, `.key()`, `.value()` and
    `.output()` are initializers for one kernel each. Every member computes
    its factor deterministically from `(seed, layer_index, shape)`, so the
    query and key members of the same seed and layer always fit together,
    in any order and in any process.

    Kernel layout (that of `keras.layers.MultiHeadAttention` and of
    `keras_attn.layers.MultiHeadSelfAttention`): query, key and value
    kernels `(d, heads, head_dim)`, output kernel `(heads, head_dim, d)`.

    - Query/key: per head `h`, `A_h = alpha1·Z_h + beta1·I` (`d × d`, an
      independent `Z_h` per head). With the SVD `A_h = U S Vᵀ` and
      `k = head_dim`, `W_q^h = U[:, :k]·sqrt(S[:k])` and
      `W_k^h = V[:, :k]·sqrt(S[:k])`, so `W_q^h W_k^hᵀ` is the best rank-`k`
      approximation of `A_h` (Eckart–Young).
    - Value/output: `A = alpha2·Z − beta2·I` for the whole layer, factored
      the same way over `m = heads·head_dim` inner dimensions:
      `W_v W_o == A` exactly when `m >= d` (rank-`m` best approximation
      otherwise).

    When the inner size exceeds `d` (`head_dim > d` for a query/key head,
    `m > d` for value/output), both factors are multiplied by the same
    random matrix with orthonormal rows, which keeps the product exact.
    Biases are not this initializer's business; the paper sets them to
    zero (`apply_mimetic_init` does).

    Args:
        alpha1: non-negative float, weight of the noise `Z1` in `W_q W_kᵀ`.
        beta1: non-negative float, weight of the identity in `W_q W_kᵀ`.
        alpha2: non-negative float, weight of the noise `Z2` in `W_v W_o`.
        beta2: non-negative float, weight of the negated identity in
            `W_v W_o`.
        seed: int or `None`. `None` draws a seed once, at construction, so
            that the members of one object still fit together.
        role: `None` (the shared object) or one of `"query"`, `"key"`,
            `"value"`, `"output"` (a member). Use the member methods rather
            than setting it by hand.
        layer_index: non-negative int; each attention layer of a model takes
            its own index and so its own `Z`s.

    Call arguments:
        shape: the kernel shape, `(d, heads, head_dim)` for the query, key
            and value members, `(heads, head_dim, d)` for the output member.
        dtype: the dtype of the result. Defaults to `keras.config.floatx()`.

    Returns:
        The member's kernel as a tensor of `shape`.

    Example:

    >>> mimetic = MimeticInitializer(seed=0)
    >>> w_q = mimetic.query()((16, 2, 8))
    >>> w_k = mimetic.key()((16, 2, 8))
    >>> product = np.einsum("dhk,ehk->hde", w_q, w_k)  # (heads, d, d)
    >>> bool(np.diagonal(product, axis1=1, axis2=2).mean() > 0.3)
    True

    References:
        - [Trockman & Kolter, 2023](https://arxiv.org/abs/2305.09828)
    """

    def __init__(
        self,
        alpha1: float = 0.7,
        beta1: float = 0.7,
        alpha2: float = 0.4,
        beta2: float = 0.4,
        seed: int | None = None,
        role: str | None = None,
        layer_index: int = 0,
    ):
        for name, value in (
            ("alpha1", alpha1),
            ("beta1", beta1),
            ("alpha2", alpha2),
            ("beta2", beta2),
        ):
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ValueError(f"`{name}` must be a number. Received: {name}={value!r}")
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(
                    f"`{name}` must be finite and non-negative. Received: {name}={value!r}"
                )
        if seed is None:
            seed = int(np.random.default_rng().integers(2**31))
        _check_non_negative_int("seed", seed)
        _check_non_negative_int("layer_index", layer_index)
        if role is not None and role not in ROLES:
            raise ValueError(f"`role` must be None or one of {ROLES}. Received: role={role!r}")
        self.alpha1 = float(alpha1)
        self.beta1 = float(beta1)
        self.alpha2 = float(alpha2)
        self.beta2 = float(beta2)
        self.seed = int(seed)
        self.role = role
        self.layer_index = layer_index

    def query(self, layer_index: int | None = None) -> "MimeticInitializer":
        """The query-kernel member, for `layer_index` (default: this object's)."""
        return self._member("query", layer_index)

    def key(self, layer_index: int | None = None) -> "MimeticInitializer":
        """The key-kernel member, paired with `query(layer_index)`."""
        return self._member("key", layer_index)

    def value(self, layer_index: int | None = None) -> "MimeticInitializer":
        """The value-kernel member, for `layer_index` (default: this object's)."""
        return self._member("value", layer_index)

    def output(self, layer_index: int | None = None) -> "MimeticInitializer":
        """The output-kernel member, paired with `value(layer_index)`."""
        return self._member("output", layer_index)

    def _member(self, role, layer_index):
        config = self.get_config()
        config["role"] = role
        if layer_index is not None:
            config["layer_index"] = layer_index
        return MimeticInitializer(**config)

    def __call__(self, shape: tuple[int, ...], dtype: str | None = None) -> Tensor:
        if self.role is None:
            raise ValueError(
                "A `MimeticInitializer` makes a kernel only through one of its members "
                "`.query()`, `.key()`, `.value()` or `.output()`. Received: role=None"
            )
        shape = tuple(int(size) for size in shape)
        if len(shape) != 3:
            raise ValueError(
                f"The {self.role} kernel must have rank 3, "
                f"{'(heads, head_dim, d)' if self.role == 'output' else '(d, heads, head_dim)'}. "
                f"Received: shape={shape}"
            )
        if self.role in ("query", "key"):
            kernel = self._query_key_kernel(shape)
        else:
            kernel = self._value_output_kernel(shape)
        dtype = keras.backend.standardize_dtype(dtype or keras.config.floatx())
        return keras.ops.convert_to_tensor(kernel, dtype=dtype)

    def _query_key_kernel(self, shape):
        dim, heads, head_dim = shape
        rng = self._generator(QUERY_KEY_STREAM)
        noise = rng.standard_normal((heads, dim, dim)) / math.sqrt(dim)  # (heads, d, d)
        kernel = np.empty(shape)  # (d, heads, head_dim)
        for head in range(heads):
            target = self.alpha1 * noise[head] + self.beta1 * np.eye(dim)  # (d, d)
            left, right = factor_matrix(target, head_dim, rng)  # (d, head_dim) each
            kernel[:, head] = left if self.role == "query" else right
        return kernel

    def _value_output_kernel(self, shape):
        if self.role == "value":
            dim, heads, head_dim = shape
        else:
            heads, head_dim, dim = shape
        rng = self._generator(VALUE_OUTPUT_STREAM)
        noise = rng.standard_normal((dim, dim)) / math.sqrt(dim)  # (d, d)
        target = self.alpha2 * noise - self.beta2 * np.eye(dim)  # (d, d)
        left, right = factor_matrix(target, heads * head_dim, rng)  # (d, heads * head_dim)
        if self.role == "value":
            return left.reshape(dim, heads, head_dim)  # (d, heads, head_dim)
        return right.T.reshape(heads, head_dim, dim)  # (heads, head_dim, d)

    def _generator(self, stream):
        sequence = np.random.SeedSequence(self.seed, spawn_key=(self.layer_index, stream))
        return np.random.default_rng(sequence)

    def get_config(self):
        return {
            "alpha1": self.alpha1,
            "beta1": self.beta1,
            "alpha2": self.alpha2,
            "beta2": self.beta2,
            "seed": self.seed,
            "role": self.role,
            "layer_index": self.layer_index,
        }


def factor_matrix(target, width, rng):
    """Factors a square matrix as `left @ right.T` with `width` inner columns.

    With the SVD `target = U S Vᵀ` and `r = min(width, d)`, `left` is
    `U[:, :r]·sqrt(S[:r])` and `right` is `V[:, :r]·sqrt(S[:r])`: the best
    rank-`r` approximation of `target`. When `width > d` both are multiplied
    by the same `(d, width)` matrix with orthonormal rows drawn from `rng`,
    which leaves the product unchanged.

    Args:
        target: `(d, d)` numpy array.
        width: int, number of columns of each factor.
        rng: numpy `Generator`, used only when `width > d`.

    Returns:
        `(left, right)`, each `(d, width)`.
    """
    dim = target.shape[0]
    u, s, vt = np.linalg.svd(target)  # (d, d), (d,), (d, d)
    rank = min(width, dim)
    root = np.sqrt(s[:rank])
    left = u[:, :rank] * root  # (d, rank)
    right = vt[:rank].T * root  # (d, rank)
    if width > dim:
        # (width, d) with orthonormal columns
        basis, _ = np.linalg.qr(rng.standard_normal((width, dim)))
        left, right = left @ basis.T, right @ basis.T  # (d, width) each
    return left, right


def _check_non_negative_int(name, value):
    if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 0:
        raise ValueError(f"`{name}` must be a non-negative integer. Received: {name}={value!r}")
