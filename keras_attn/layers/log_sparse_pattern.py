"""LogSparse attention patterns.

Paper: Li et al., "Enhancing the Locality and Breaking the Memory Bottleneck
of Transformer on Time Series Forecasting", NeurIPS 2019.
"""

import numbers

import keras
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.layers.attention_pattern import AttentionPattern
from keras_attn.utils.validation import check_choice, check_int, sequence_positions

VARIANTS = ("pure", "local", "restart")
# Powers of two up to 2**30: enough to count the bits of any int32 length.
_MAX_BITS = 31


@keras.saving.register_keras_serializable(package="keras_attn")
class LogSparsePattern(AttentionPattern):
    """Causal LogSparse pattern: each query sees itself and keys `2^j` back.

    Every variant is a set of backward offsets, the same for every query, and
    query `l` attends to the keys `l - offset` that exist (`>= 0`). Offset 0
    (the query itself) is always included, so no row is empty, and no offset
    is negative, so no future key is ever reachable. A query has `O(log L)`
    keys, so attention costs `O(L log L)` memory per layer.

    - `"pure"`: offsets `0, 1, 2, 4, ..., 2^j` with `2^j <= L - 1`
      (`floor(log2(L - 1)) + 2` keys), the paper's Figure 3.
    - `"local"`: a dense window `0, ..., w - 1` (`w = local_window`, about
      `log2 L` in the paper), then LogSparse steps from the window's edge:
      `w - 1 + 2^j`. The paper's text does not fix where the steps start;
      starting at the window edge leaves no gap right after the window.
    - `"restart"`: the sequence before each query is cut into subsequences of
      `S = subsequence_length` cells, counted back from the query, and
      LogSparse restarts in each one: offsets `m * S + {0, 1, 2, 4, ...}`
      (`< S` inside a subsequence) for `m = 0, 1, ...`. Keys per query:
      `ceil(L / S) * (floor(log2(S - 1)) + 2)`, so `O(log L)` when `S`
      grows with `L` as in the paper. Counting subsequences back from the
      query (rather than from fixed boundaries) keeps every cell's whole past
      reachable through stacked layers.

    Args:
        variant: `"pure"`, `"local"` or `"restart"`.
        local_window: int >= 1, the dense window of `"local"`; required by
            and only used with that variant.
        subsequence_length: int >= 2, the subsequence length of `"restart"`;
            required by and only used with that variant.

    Example:

    >>> pattern = LogSparsePattern("pure")
    >>> indices, valid = pattern.key_indices(6)
    >>> keras.ops.convert_to_numpy(indices)[5].tolist()  # offsets 0, 1, 2, 4
    [5, 4, 3, 1]
    >>> keras.ops.convert_to_numpy(valid)[1].tolist()
    [True, True, False, False]

    References:
        - [Li et al., 2019](https://arxiv.org/abs/1907.00235)
    """

    def __init__(
        self,
        variant: str = "pure",
        local_window: int | None = None,
        subsequence_length: int | None = None,
    ):
        self.variant = check_choice("variant", variant, VARIANTS)
        self.local_window = _check_variant_argument(
            "local_window", local_window, variant == "local", minimum=1
        )
        self.subsequence_length = _check_variant_argument(
            "subsequence_length", subsequence_length, variant == "restart", minimum=2
        )

    def key_indices(self, length: int | Tensor) -> tuple[Tensor, Tensor]:
        offsets = self.offsets(length)  # (K,)
        queries = ops.expand_dims(sequence_positions(length), 1)  # (length, 1)
        keys = queries - offsets  # (length, K)
        return ops.maximum(keys, 0), keys >= 0

    def offsets(self, length: int | Tensor) -> Tensor:
        """The backward offsets, an int32 `(K,)` tensor starting with 0.

        Args:
            length: int or scalar integer tensor, the sequence length.
        """
        if isinstance(length, numbers.Integral):
            return ops.convert_to_tensor(self.static_offsets(length), "int32")
        if self.variant == "pure":
            return _with_powers_of_two(ops.zeros((1,), "int32"), length - 1)
        if self.variant == "local":
            window = ops.arange(0, self.local_window, dtype="int32")  # (w,)
            steps = _powers_of_two(_bit_length(length - self.local_window))
            return ops.concatenate([window, steps + (self.local_window - 1)])
        return self._restart_offsets(length)

    def static_offsets(self, length: int | Tensor) -> tuple[int, ...] | None:
        """The offsets as a tuple of Python ints (`None` for a tensor length)."""
        if not isinstance(length, numbers.Integral):
            return None
        length = int(length)
        if self.variant == "pure":
            return (0, *_python_powers_of_two(length - 1))
        if self.variant == "local":
            window = self.local_window
            steps = _python_powers_of_two(length - window)
            return (*range(window), *(window - 1 + step for step in steps))
        size = self.subsequence_length
        inside = (0, *_python_powers_of_two(size - 1))
        return tuple(m * size + o for m in range(_ceil_div(length, size)) for o in inside)

    def _restart_offsets(self, length):
        size = self.subsequence_length
        inside = _with_powers_of_two(ops.zeros((1,), "int32"), size - 1)  # (k,)
        starts = ops.arange(0, _ceil_div(length, size), dtype="int32") * size  # (m,)
        return ops.reshape(ops.expand_dims(starts, 1) + inside, (-1,))  # (m * k,)

    def get_config(self):
        return {
            "variant": self.variant,
            "local_window": self.local_window,
            "subsequence_length": self.subsequence_length,
        }


def _check_variant_argument(name, value, required, minimum):
    if not required:
        if value is not None:
            raise ValueError(
                f"`{name}` only applies to its variant and must be None here. "
                f"Received: {name}={value!r}"
            )
        return None
    return check_int(name, value, minimum)


def _bit_length(value):
    """Bits of an int or int32 scalar tensor (4 -> 3; 0 and below -> 0).

    Static lengths stay Python ints, so XLA and JAX see static shapes; a
    length that is only known at run time (a SavedModel served at any
    length) gives a scalar tensor. A symbolic JAX dimension (a JAX export
    with a dynamic length), whose bit count is no shape expression, gives
    every bit of an int32: the extra offsets reach before position 0 and
    are masked out.
    """
    if isinstance(value, numbers.Integral):
        return max(int(value), 0).bit_length()
    if not ops.is_tensor(value):
        return _MAX_BITS
    return ops.sum(ops.cast(_powers_of_two(_MAX_BITS) <= value, "int32"))


def _ceil_div(value, divisor):
    if isinstance(value, numbers.Integral):
        return -(-int(value) // divisor)
    return (value + divisor - 1) // divisor


def _python_powers_of_two(largest):
    """Every power of two `<= largest`, as Python ints."""
    return tuple(2**j for j in range(_bit_length(largest)))


def _powers_of_two(count):
    """`1, 2, 4, ..., 2^(count - 1)` as an int32 `(count,)` tensor, `count <= 31`.

    The first `count` of a constant (not a left shift, which the LiteRT
    converter keeps as a TensorFlow op).
    """
    powers = ops.convert_to_tensor([2**j for j in range(_MAX_BITS)], "int32")  # (31,)
    return ops.slice(powers, (0,), (count,))  # (count,)


def _with_powers_of_two(prefix, largest):
    """`prefix` followed by every power of two `<= largest`."""
    return ops.concatenate([prefix, _powers_of_two(_bit_length(largest))])
