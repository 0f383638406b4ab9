"""A learned class token prepended to a token sequence."""

import keras
from keras import ops

from keras_attn._typing import Initializer, Tensor
from keras_attn.utils.validation import check_rank, feature_spec


@keras.saving.register_keras_serializable(package="keras_attn")
class ClassToken(keras.layers.Layer):
    """Prepends one learned token (CLS) to every sequence.

    Args:
        initializer: initializer of the `(dim,)` token.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: `(batch, length, dim)`.

    Returns:
        `(batch, length + 1, dim)`, the token first.

    Example:

    >>> ClassToken()(np.zeros((2, 4, 8))).shape
    (2, 5, 8)
    """

    def __init__(self, initializer: Initializer = "zeros", **kwargs):
        super().__init__(**kwargs)
        self.initializer = keras.initializers.get(initializer)

    def build(self, input_shape):
        check_rank("inputs", input_shape, 3)
        self.input_spec = feature_spec(input_shape)
        self.token = self.add_weight(
            name="token", shape=(input_shape[-1],), initializer=self.initializer
        )

    def call(self, inputs: Tensor) -> Tensor:
        batch = ops.shape(inputs)[0]
        token = ops.cast(ops.convert_to_tensor(self.token), inputs.dtype)
        tokens = ops.broadcast_to(token[None, None, :], (batch, 1, inputs.shape[-1]))
        return ops.concatenate([tokens, inputs], axis=1)  # (batch, length + 1, dim)

    def compute_output_shape(self, input_shape):
        length = None if input_shape[1] is None else input_shape[1] + 1
        return (input_shape[0], length, input_shape[2])

    def get_config(self):
        config = super().get_config()
        config["initializer"] = keras.initializers.serialize(self.initializer)
        return config
