"""The layer norm factory shared by the blocks and models of keras_attn."""

import keras


def layer_norm(name, epsilon, dtype=None):
    """A `keras.layers.LayerNormalization` over the last axis.

    Args:
        name: layer name.
        epsilon: float, added to the variance.
        dtype: the dtype policy, usually the calling layer's
            `dtype_policy`; `None` for the global one.

    Returns:
        An unbuilt `keras.layers.LayerNormalization`.

    Example:

    >>> layer_norm("mlp_norm", 1e-6).epsilon
    1e-06
    """
    return keras.layers.LayerNormalization(epsilon=epsilon, dtype=dtype, name=name)
