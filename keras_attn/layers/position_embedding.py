"""Learned absolute position embeddings added to a sequence."""

import keras
from keras import ops

from keras_attn._typing import Initializer, Tensor
from keras_attn.layers._config import argument_config
from keras_attn.utils.validation import (
    check_int,
    check_length,
    checked_lookup,
    feature_spec,
    renamed_arguments,
    renamed_config,
)


@keras.saving.register_keras_serializable(package="keras_attn")
class PositionEmbedding(keras.layers.Layer):
    """Adds a learned embedding of each position to a sequence.

    Sequences shorter than `max_sequence_length` use the first positions of the table,
    so one model serves several lengths. A longer sequence raises a
    `ValueError`, eagerly and when traced for compilation (its length is
    static then). A length left unknown while tracing (a `None` axis of an
    exported model's signature) cannot raise when it is run: a longer
    sequence gets NaN at every position of every example instead.

    Args:
        max_sequence_length: int, the longest sequence the table covers.
        initializer: initializer of the `(max_sequence_length, dim)` table.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: tensor of shape `(batch, length, dim)`, `length <= max_sequence_length`.

    Returns:
        Tensor of the input's shape: `inputs + table[:length]`.

    Example:

    >>> layer = PositionEmbedding(max_sequence_length=10)
    >>> layer(np.zeros((2, 4, 8))).shape
    (2, 4, 8)
    """

    @renamed_arguments(max_length="max_sequence_length")
    def __init__(
        self,
        max_sequence_length: int,
        initializer: Initializer = "random_normal",
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.max_sequence_length = check_int("max_sequence_length", max_sequence_length)
        self.initializer = keras.initializers.get(initializer)
        self.supports_masking = True

    def build(self, input_shape):
        self.input_spec = feature_spec(input_shape)
        check_length("inputs", input_shape[1], "max_sequence_length", self.max_sequence_length)
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.max_sequence_length, input_shape[-1]),
            initializer=self.initializer,
        )

    def call(self, inputs: Tensor) -> Tensor:
        check_length("inputs", inputs.shape[1], "max_sequence_length", self.max_sequence_length)
        table = ops.convert_to_tensor(self.embeddings)
        # A gather, not a slice: with a symbolic length (JAX export) a slice
        # would have to prove `length <= max_sequence_length`, which it cannot.
        positions = ops.expand_dims(ops.arange(0, ops.shape(inputs)[1]), 0)  # (1, length)
        rows = checked_lookup(
            lambda ids: ops.take(table, ids, axis=0),
            positions,
            self.max_sequence_length,
            "positions",
            f"the position embedding '{self.name}'",
        )  # (1, length, dim)
        return inputs + ops.cast(rows, inputs.dtype)  # (batch, length, dim)

    def compute_output_shape(self, input_shape):
        return input_shape

    def get_config(self):
        arguments = ("max_sequence_length", "initializer")
        return {**super().get_config(), **argument_config(self, arguments)}

    @classmethod
    def from_config(cls, config):
        # Configs saved before the rename name the table size `max_length`.
        return super().from_config(renamed_config(config, {"max_length": "max_sequence_length"}))
