"""Sparse attention patterns: which keys each query may attend to.

A pattern lists, for every query position, a fixed number of key positions
(`key_indices`). The attention core gathers only those keys, so a pattern with
`K` keys per query costs `O(L * K)` memory instead of `O(L * L)`.
"""

import keras
from keras import ops

from keras_attn.utils.validation import check_int


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

    def key_indices(self, length):
        """Returns `(indices, valid)`, both of shape `(length, K)`.

        Args:
            length: int or scalar integer tensor, the sequence length.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement `key_indices(length)`.")

    def dense_mask(self, length):
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

    def __init__(self, window):
        self.window = check_int("window", window)

    def key_indices(self, length):
        positions = ops.arange(length, dtype="int32")[:, None]
        offsets = ops.arange(self.window - 1, -1, -1, dtype="int32")[None, :]
        keys = positions - offsets  # (length, window)
        return ops.maximum(keys, 0), keys >= 0

    def get_config(self):
        return {"window": self.window}
