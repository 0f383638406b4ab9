"""An embedding whose ids are checked against its table."""

import keras

from keras_attn._typing import Tensor
from keras_attn.utils.validation import check_int, checked_lookup


@keras.saving.register_keras_serializable(package="keras_attn")
class CheckedEmbedding(keras.layers.ReversibleEmbedding):
    """A `keras.layers.ReversibleEmbedding` that refuses ids outside its table.

    `keras.layers.Embedding` returns NaN for an id outside its table on JAX
    and fails inside a gather on TensorFlow and torch. This layer checks the
    ids first: executed eagerly, an id below 0 or from `input_dim` on raises
    a `ValueError` naming `ids_name` and the id. Traced for compilation
    (`predict`, `fit` and `evaluate` on TensorFlow and JAX,
    `jit_compile=True`, an exported model), where a check on the data
    cannot raise, an example (an index of the first axis) that holds such
    an id gets NaN embeddings at every position, so its outputs, and the
    loss of a batch that holds it, are NaN; the other examples are
    embedded as usual. Check new data eagerly (`model(x)`) before compiled
    calls: under `fit`, a NaN loss makes the weights NaN.
    `reverse=True` scores features against the table, as in
    `ReversibleEmbedding`.

    Args:
        input_dim: int, number of rows of the table (ids `0..input_dim - 1`).
        output_dim: int, size of each embedding.
        ids_name: str, the name of the ids in error messages, such as the
            model input that feeds the layer.
        **kwargs: further `keras.layers.ReversibleEmbedding` arguments
            (`embeddings_initializer`, `mask_zero`, ...) and base layer
            arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: int ids `(...)`, or with `reverse=True` features
            `(..., output_dim)`.
        reverse: bool, score features against the table instead.

    Returns:
        `(..., output_dim)` embeddings, or `(..., input_dim)` scores with
        `reverse=True`.

    Example:

    >>> layer = CheckedEmbedding(10, 4, ids_name="token_ids")
    >>> layer(np.array([[1, 9]])).shape
    (1, 2, 4)
    >>> layer(np.array([[1, 10]]))  # doctest: +SKIP
    ValueError: ... `token_ids` must hold ids from 0 to 9, ... Received: max(token_ids)=10
    """

    def __init__(self, input_dim: int, output_dim: int, ids_name: str = "inputs", **kwargs):
        input_dim = check_int("input_dim", input_dim)
        super().__init__(input_dim, check_int("output_dim", output_dim), **kwargs)
        if not isinstance(ids_name, str):
            raise ValueError(f"`ids_name` must be a str. Received: ids_name={ids_name!r}")
        self.ids_name = ids_name

    def call(self, inputs: Tensor, reverse: bool = False) -> Tensor:
        if reverse:
            return super().call(inputs, reverse=True)
        table = f"the embedding '{self.name}'"
        return checked_lookup(super().call, inputs, self.input_dim, self.ids_name, table)

    def get_config(self):
        config = super().get_config()
        config["ids_name"] = self.ids_name
        return config
