"""A small word-level decoder-only language model.

Token embedding, learned positions, pre-norm causal `TransformerBlock`s on
the library's attention core (ReLU feed-forward layers, as in the language
model Geva et al. (2021) analyse), a final layer norm and an untied output
embedding. It is the model `keras-attn reproduce ffn-memories` trains.
"""

from collections.abc import Callable

import keras

from keras_attn.layers import CheckedEmbedding, PositionEmbedding, TransformerBlock
from keras_attn.utils.validation import check_heads, check_int, renamed_arguments


@renamed_arguments(max_length="max_sequence_length")
def build_decoder_language_model(
    vocabulary_size: int,
    max_sequence_length: int,
    hidden_dim: int = 128,
    num_layers: int = 4,
    num_heads: int = 4,
    intermediate_dim: int = 512,
    dropout: float = 0.0,
    activation: str | Callable = "relu",
    name: str = "decoder_language_model",
) -> keras.Model:
    """Builds a causal transformer language model as a functional Keras model.

    Token id 0 is padding: it is masked out of the attention, and padded
    sequences must put it at the end.

    Args:
        vocabulary_size: int, number of token ids (including padding 0).
        max_sequence_length: int, longest input sequence.
        hidden_dim: int, model width, a multiple of `num_heads`.
        num_layers: int, number of transformer blocks.
        num_heads: int, attention heads per block.
        intermediate_dim: int, hidden size of each feed-forward layer (the
            number of key-value memories per layer).
        dropout: float, dropout in the blocks.
        activation: activation of the feed-forward hidden layer.
        name: model name.

    Returns:
        A `keras.Model` from `(batch, length)` int token ids to
        `(batch, length, vocabulary_size)` next-token logits. Its blocks are
        the layers named `block_0`, `block_1`, ..., the final norm is
        `final_norm` and the output embedding is the Dense layer
        `output_embedding` (kernel `(hidden_dim, vocabulary_size)`).

    Example:

    >>> model = build_decoder_language_model(
    ...     50, 8, hidden_dim=16, num_layers=2, num_heads=2, intermediate_dim=32
    ... )
    >>> model(np.ones((2, 8), "int32")).shape
    (2, 8, 50)

    References:
        - [Geva et al., 2021](https://arxiv.org/abs/2012.14913)
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
    """
    vocabulary_size = check_int("vocabulary_size", vocabulary_size)
    max_sequence_length = check_int("max_sequence_length", max_sequence_length)
    num_layers = check_int("num_layers", num_layers)
    hidden_dim, num_heads = check_heads(hidden_dim, num_heads)
    tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
    x = CheckedEmbedding(
        vocabulary_size, hidden_dim, ids_name="tokens", mask_zero=True, name="token_embedding"
    )(tokens)  # (batch, length, hidden_dim)
    x = PositionEmbedding(max_sequence_length, name="position_embedding")(x)
    for index in range(num_layers):
        x = TransformerBlock(
            num_heads,
            intermediate_dim,
            dropout=dropout,
            activation=activation,
            attention_kwargs={"attention_pattern": "causal"},
            name=f"block_{index}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    logits = keras.layers.Dense(vocabulary_size, name="output_embedding")(x)
    return keras.Model(tokens, logits, name=name)
