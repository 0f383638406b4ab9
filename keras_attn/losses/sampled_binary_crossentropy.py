"""The official SASRec loss: binary cross-entropy on the target and one sampled negative."""

from typing import Any

import keras

from keras_attn._typing import Tensor


@keras.saving.register_keras_serializable(package="keras_attn")
class SampledBinaryCrossentropy(keras.losses.Loss):
    """Binary cross-entropy of the target against one sampled negative item.

    The official SASRec's loss: with `s` the model's logits over all items,
    each sample costs `-log sigmoid(s[positive]) - log sigmoid(-s[negative])`,
    averaged over the batch (the official code's two `BCEWithLogitsLoss`
    means, added).

    Call arguments:
        y_true: `(batch, 2)` int item ids: the target, then the negative
            (see `keras_attn.recommendation.sample_negatives`).
        y_pred: `(batch, num_items + 1)` logits over all items.

    Example:

    >>> import numpy as np
    >>> loss = SampledBinaryCrossentropy()
    >>> round(float(loss(np.array([[1, 2]]), np.array([[0.0, 0.0, 0.0]]))), 4)  # 2 log 2
    1.3863
    """

    def __init__(self, name: str = "sampled_binary_crossentropy", **kwargs: Any):
        super().__init__(name=name, **kwargs)

    def call(self, y_true: Tensor, y_pred: Tensor) -> Tensor:
        ids = keras.ops.cast(y_true, "int32")  # (batch, 2)
        picked = keras.ops.take_along_axis(y_pred, ids, axis=1)  # (batch, 2)
        signs = keras.ops.convert_to_tensor([-1.0, 1.0], y_pred.dtype)
        return keras.ops.sum(keras.ops.softplus(picked * signs), axis=1)  # (batch,)
