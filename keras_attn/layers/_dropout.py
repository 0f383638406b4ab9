"""Dropout of a sequence's last positions with the mask of the whole sequence."""

from keras import ops


def dropout_of_last_positions(dropout, inputs, length, axis=1, training=None):
    """`dropout(full, training)` at the last positions of `full`, given only those.

    `inputs` holds the last `inputs.shape[axis]` of `length` positions along
    `axis`. Active dropout draws its mask for all `length` positions and
    keeps the last ones, so the layer's random stream and the entries it
    keeps are those of a call on the whole sequence: a model that computes
    only its last positions trains as the full model does.

    Args:
        dropout: a `keras.layers.Dropout`.
        inputs: tensor, the last positions along `axis`.
        length: int or scalar tensor, the length of the whole sequence.
        axis: int, the axis of the positions.
        training: bool, whether dropout is active.

    Returns:
        A tensor of the shape of `inputs`.

    Example:

    >>> dropout = keras.layers.Dropout(0.5, seed=1)
    >>> dropout_of_last_positions(dropout, np.ones((1, 2, 3)), 4).shape
    (1, 2, 3)
    """
    if not training or dropout.rate == 0:
        return dropout(inputs, training=training)
    shape = list(ops.shape(inputs))
    shape[axis] = length
    keep = dropout(ops.ones(shape, inputs.dtype), training=True)  # 0 or 1 / (1 - rate)
    last = (slice(None),) * axis + (slice(-ops.shape(inputs)[axis], None),)
    return inputs * keep[last]
