"""Sparse attention patterns: which keys each query may attend to.

A pattern lists, for every query position, a fixed number of key positions
(`key_indices`), so a pattern with `K` keys per query costs `O(L * K)` memory
instead of `O(L * L)`. A pattern whose query `i` reads the keys `i - o` for a
fixed list of offsets `o` (`static_offsets`) is computed from shifted views
of the keys and values, one logit per offset, without copying them per slot;
any other pattern has its keys gathered, `(batch, L, K, heads, key_dim)`.
"""

import numbers

import keras
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.utils.validation import check_int, sequence_positions


@keras.saving.register_keras_serializable(package="keras_attn")
class AttentionPattern:
    """Base class of sparse attention patterns.

    Subclasses implement `key_indices(length)`, returning two `(length, K)`
    tensors: the key position each query slot reads, and whether that slot is
    used. Unused slots must still hold a valid index (any position in
    `[0, length)`); the core masks them out. Patterns must not return a row
    with no used slot.

    Patterns are serializable with `get_config`/`from_config`, so a layer that
    holds one saves to `.keras` like any other argument.
    """

    def key_indices(self, length: int | Tensor) -> tuple[Tensor, Tensor]:
        """Returns `(indices, valid)`, both of shape `(length, K)`.

        Args:
            length: int or scalar integer tensor, the sequence length.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement `key_indices(length)`.")

    def static_offsets(self, length: int | Tensor) -> tuple[int, ...] | None:
        """The backward offsets of every slot, or `None`.

        A pattern whose query `i` reads key `i - offsets[j]` in slot `j`
        (the slot being unused where that is negative) returns its offsets
        as a tuple of Python ints for a Python int `length`, and the core
        then computes attention from shifted keys and values instead of
        gathering them. `None` (the default, and for a length known only at
        run time) makes the core gather `key_indices`.

        Args:
            length: int or scalar integer tensor, the sequence length.
        """
        return None

    def dense_mask(self, length: int) -> Tensor:
        """The pattern as a dense boolean `(length, length)` mask.

        Meant for tests and plots; the attention core never builds it.
        """
        indices, valid = self.key_indices(length)
        # (length, K, length) one-hot rows, summed over the K slots.
        hits = ops.one_hot(indices, length) * ops.cast(valid, "float32")[..., None]
        return ops.sum(hits, axis=1) > 0

    def get_config(self):
        return {}

    @classmethod
    def from_config(cls, config):
        return cls(**config)


@keras.saving.register_keras_serializable(package="keras_attn")
class CausalWindowPattern(AttentionPattern):
    """Causal local attention: each query sees itself and the previous keys.

    Query `i` attends to keys `max(0, i - window + 1) ... i`.

    Args:
        window: int >= 1, the number of keys per query, itself included.

    Example:

    >>> pattern = CausalWindowPattern(window=2)
    >>> indices, valid = pattern.key_indices(3)
    >>> keras.ops.convert_to_numpy(indices).tolist()
    [[0, 0], [0, 1], [1, 2]]
    """

    def __init__(self, window: int):
        self.window = check_int("window", window)

    def key_indices(self, length: int | Tensor) -> tuple[Tensor, Tensor]:
        positions = ops.expand_dims(sequence_positions(length), 1)  # (length, 1)
        offsets = ops.arange(self.window - 1, -1, -1, dtype="int32")  # (window,)
        keys = positions - offsets  # (length, window)
        return ops.maximum(keys, 0), keys >= 0

    def static_offsets(self, length: int | Tensor) -> tuple[int, ...] | None:
        if not isinstance(length, numbers.Integral):
            return None
        return tuple(range(self.window - 1, -1, -1))

    def get_config(self):
        return {"window": self.window}
