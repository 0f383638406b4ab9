"""A BERT encoder as a functional Keras model (Devlin et al., 2019).

A stack of post-norm `TransformerBlock`s on the library's attention core;
head importance and head pruning (Michel et al., 2019) find and rebuild the
attention layer inside each block.
"""

import keras
from keras import ops

from keras_attn.layers import CheckedEmbedding, PositionEmbedding, TransformerBlock
from keras_attn.utils.validation import check_heads, check_int, check_rate


def build_bert_encoder(
    vocabulary_size: int,
    num_layers: int,
    num_heads: int,
    hidden_dim: int,
    intermediate_dim: int,
    max_sequence_length: int = 512,
    num_segments: int = 2,
    layer_norm_epsilon: float = 1e-12,
    dropout: float = 0.0,
    output_hidden_states: bool = False,
    output_attention_scores: bool = False,
    head_mask: bool = False,
    name: str = "bert_encoder",
) -> keras.Model:
    """Builds a BERT encoder with mean-pooled, L2-normalised sentence embeddings.

    Embeddings: `LayerNorm(token + position + segment)`. Each layer is a
    post-norm `TransformerBlock`: `x = LayerNorm(x + attention(x))`, then
    `x = LayerNorm(x + W2 gelu(W1 x))`, with the exact (erf) GELU. The
    sentence embedding is the mean of the last hidden states over the real
    tokens, scaled to unit length, as in sentence-transformers. Dropout is
    placed as in BERT: on the embeddings, the attention weights, and the
    attention and feed-forward outputs before each residual addition (not
    on the feed-forward hidden units).

    Args:
        vocabulary_size: int, number of token ids.
        num_layers: int, number of transformer layers.
        num_heads: int, attention heads per layer.
        hidden_dim: int, model width, a multiple of `num_heads`.
        intermediate_dim: int, hidden size of the feed-forward layers.
        max_sequence_length: int, size of the position table.
        num_segments: int, size of the segment (token type) table.
        layer_norm_epsilon: float, epsilon of every layer norm.
        dropout: float, BERT's dropout rate (0 for inference and pruning;
            BERT trains with 0.1).
        output_hidden_states: bool, also return `"hidden_states"`, the
            embeddings and every layer's output stacked:
            `(batch, num_layers + 1, length, hidden_dim)`.
        output_attention_scores: bool, also return `"attention_scores"`,
            every layer's attention weights stacked:
            `(batch, num_layers, num_heads, length, length)`.
        head_mask: bool, add an input `"head_mask"` of shape
            `(batch, num_layers, num_heads)` that multiplies each head's
            output (1 keeps a head, 0 removes it).
        name: model name.

    Returns:
        A `keras.Model` taking a dict with `"token_ids"`, `"padding_mask"`,
        `"segment_ids"` (each `(batch, length)` int; see
        `keras_attn.text.WordPieceTokenizer`) and optionally `"head_mask"`,
        returning a dict with `"sequence_output"` `(batch, length, hidden_dim)`,
        `"sentence_embedding"` `(batch, hidden_dim)` and the optional
        outputs. Layer `i` is the `TransformerBlock` named `layer_{i}`; its
        attention layer is `attention_layers(model)["layer_{i}/attention"]`.

    Example:

    >>> model = build_bert_encoder(100, num_layers=2, num_heads=2, hidden_dim=8,
    ...                            intermediate_dim=16)
    >>> inputs = {name: np.ones((3, 5), "int32")
    ...           for name in ("token_ids", "padding_mask", "segment_ids")}
    >>> model(inputs)["sentence_embedding"].shape
    (3, 8)

    References:
        - [Devlin et al., 2019](https://arxiv.org/abs/1810.04805)
        - [Michel et al., 2019](https://arxiv.org/abs/1905.10650)
    """
    vocabulary_size = check_int("vocabulary_size", vocabulary_size)
    num_layers = check_int("num_layers", num_layers)
    hidden_dim, num_heads = check_heads(hidden_dim, num_heads)
    intermediate_dim = check_int("intermediate_dim", intermediate_dim)
    max_sequence_length = check_int("max_sequence_length", max_sequence_length)
    num_segments = check_int("num_segments", num_segments)
    dropout = check_rate("dropout", dropout)
    inputs = {
        "token_ids": keras.Input(shape=(None,), dtype="int32", name="token_ids"),
        "padding_mask": keras.Input(shape=(None,), dtype="int32", name="padding_mask"),
        "segment_ids": keras.Input(shape=(None,), dtype="int32", name="segment_ids"),
    }
    if head_mask:
        inputs["head_mask"] = keras.Input(shape=(num_layers, num_heads), name="head_mask")
    padding_mask = inputs["padding_mask"]
    x = _embeddings(inputs, vocabulary_size, hidden_dim, max_sequence_length, num_segments)
    embeddings_norm = keras.layers.LayerNormalization(
        epsilon=layer_norm_epsilon, name="embeddings_norm"
    )
    x = embeddings_norm(x)  # (batch, length, hidden_dim)
    x = keras.layers.Dropout(dropout, name="embeddings_dropout")(x)
    hidden_states, attention_scores = [x], []
    for index in range(num_layers):
        layer_head_mask = inputs["head_mask"][:, index] if head_mask else None  # (batch, heads)
        block = TransformerBlock(
            num_heads,
            intermediate_dim,
            dropout=dropout,
            mlp_hidden_dropout=0.0,
            attention_dropout=dropout,
            normalize_first=False,
            layer_norm_epsilon=layer_norm_epsilon,
            activation="gelu",
            name=f"layer_{index}",
        )
        x = block(
            x,
            mask=padding_mask,
            head_mask=layer_head_mask,
            return_attention_scores=output_attention_scores,
        )
        if output_attention_scores:
            x, scores = x  # scores: (batch, heads, length, length)
            attention_scores.append(scores)
        hidden_states.append(x)
    pooled = keras.layers.GlobalAveragePooling1D(name="mean_pooling")(x, mask=padding_mask)
    outputs = {
        "sequence_output": x,
        "sentence_embedding": keras.layers.UnitNormalization(name="sentence_embedding")(pooled),
    }
    if output_hidden_states:
        outputs["hidden_states"] = ops.stack(
            hidden_states, axis=1
        )  # (batch, layers + 1, length, dim)
    if output_attention_scores:
        # (batch, layers, heads, length, length)
        outputs["attention_scores"] = ops.stack(attention_scores, axis=1)
    return keras.Model(inputs, outputs, name=name)


def _embeddings(inputs, vocabulary_size, hidden_dim, max_sequence_length, num_segments):
    tokens = CheckedEmbedding(
        vocabulary_size, hidden_dim, ids_name="token_ids", name="token_embedding"
    )(inputs["token_ids"])  # (batch, length, hidden_dim)
    segments = CheckedEmbedding(
        num_segments, hidden_dim, ids_name="segment_ids", name="segment_embedding"
    )(inputs["segment_ids"])  # (batch, length, hidden_dim)
    x = keras.layers.Add(name="token_plus_segment")([tokens, segments])
    return PositionEmbedding(max_sequence_length, name="position_embedding")(x)
