"""Fixed input features of bit strings for the PARITY and FIRST transformers.

From "Overcoming a Theoretical Limitation of Self-Attention" (Chiang &
Cholak, ACL 2022): one-hot symbols plus positional features that are
computed from the length of each input, so that one model reads strings of
any length.
"""

import keras
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.layers._config import argument_config
from keras_attn.utils.validation import (
    check_bool,
    check_choice,
    check_int,
)

TASKS = ("parity", "first")
NUM_SYMBOLS = 3  # bit 0, bit 1 and the CLS symbol.
CLS_TOKEN = 2
POSITION_FEATURES = {"parity": 2, "first": 1}


@keras.saving.register_keras_serializable(package="keras_attn")
class BitStringFeatures(keras.layers.Layer):
    """One-hot symbols and length-aware positional features of bit strings.

    Tokens are `0` and `1` for the bits and `2` for CLS. At position `i`
    (counted from 0) of a string of total length `N` (CLS included) the
    positional features are

    - `task="parity"`: `i / N` and `(-1)^i`;
    - `task="first"`: `[i = 1]` (the first bit when CLS comes first).

    The output holds the one-hot symbol (3 values, if `include_tokens`),
    then the positional features, then zeros up to `width`. With `mirrored`,
    the vector `x` becomes `[x, -x]`, whose mean is zero, so that a layer
    norm only rescales it (the layer-norm construction of the paper).

    Args:
        task: `"parity"` or `"first"`, which positional features to compute.
        width: int, size of the feature vector before mirroring.
        include_tokens: bool, whether to start with the one-hot symbol. A
            model with a learned token embedding sets it to `False`.
        mirrored: bool, whether to output `[x, -x]` (size `2 * width`).
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: int tensor `(batch, length)` of tokens in `{0, 1, 2}`.

    Returns:
        `(batch, length, width)`, or `(batch, length, 2 * width)` if
        `mirrored`.

    Example:

    >>> layer = BitStringFeatures("parity", width=6)
    >>> layer(np.array([[1, 0, 2]]))[0, :, 3:5].numpy().round(3).tolist()
    [[0.0, 1.0], [0.333, -1.0], [0.667, 1.0]]

    References:
        - [Chiang & Cholak, 2022](https://arxiv.org/abs/2202.12172)
    """

    def __init__(
        self,
        task: str,
        width: int,
        include_tokens: bool = True,
        mirrored: bool = False,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.task = check_choice("task", task, TASKS)
        self.include_tokens = check_bool("include_tokens", include_tokens)
        self.mirrored = check_bool("mirrored", mirrored)
        # The one-hot symbols (if included) and the task's positional features must fit.
        needed = POSITION_FEATURES[task] + (NUM_SYMBOLS if self.include_tokens else 0)
        self.width = check_int("width", width, minimum=needed)

    def call(self, inputs: Tensor) -> Tensor:
        tokens = ops.cast(inputs, "int32")
        batch, length = ops.shape(tokens)[0], ops.shape(tokens)[1]
        positions = ops.cast(ops.arange(0, length), self.compute_dtype)  # (length,)
        position_features = self._position_features(positions, length)  # (length, P)
        features = [
            ops.broadcast_to(
                position_features[None], (batch, length, position_features.shape[-1])
            )  # (batch, length, P)
        ]
        if self.include_tokens:
            features.insert(0, ops.one_hot(tokens, NUM_SYMBOLS, dtype=self.compute_dtype))
        x = ops.concatenate(features, axis=-1)  # (batch, length, used)
        x = ops.pad(x, ((0, 0), (0, 0), (0, self.width - x.shape[-1])))  # (batch, length, width)
        return ops.concatenate([x, -x], axis=-1) if self.mirrored else x

    def _position_features(self, positions, length):
        if self.task == "first":
            return ops.cast(ops.equal(positions, 1.0), self.compute_dtype)[:, None]  # (length, 1)
        total = ops.cast(length, self.compute_dtype)
        parity = ops.cast(ops.mod(ops.arange(0, length), 2), self.compute_dtype)  # (length,)
        alternating = 1.0 - 2.0 * parity  # (-1)^i, (length,)
        return ops.stack([positions / total, alternating], axis=-1)  # (length, 2)

    def compute_output_shape(self, input_shape):
        return (*input_shape, self.width * (2 if self.mirrored else 1))

    def get_config(self):
        arguments = ("task", "width", "include_tokens", "mirrored")
        return {**super().get_config(), **argument_config(self, arguments)}
