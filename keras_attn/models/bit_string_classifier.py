"""A trainable transformer classifier of bit strings (Chiang & Cholak, 2022).

The learned model of the length-generalisation experiment of "Overcoming a
Theoretical Limitation of Self-Attention": a learned token embedding plus the
fixed positional features of `BitStringFeatures`, post-norm
`TransformerBlock`s with ReLU feed-forward networks, and a linear output on
CLS. With `logit_scale="log_length"` every attention layer multiplies its
logits by `log n` (n: the number of positions), the paper's remedy for
generalising from short to long strings.
"""

import keras
import numpy as np

from keras_attn.layers import (
    BitStringFeatures,
    CheckedEmbedding,
    LearnedScalePositions,
    TransformerBlock,
)
from keras_attn.utils.validation import check_heads, check_int

LOGIT_SCALES = ("none", "log_length")
POSITIONS = ("fixed", "learned_scale")


def build_bit_string_classifier(
    task: str = "first",
    hidden_dim: int = 16,
    intermediate_dim: int = 64,
    num_layers: int = 2,
    num_heads: int = 1,
    logit_scale: str = "none",
    layer_norm_epsilon: float = 1e-5,
    positions: str = "fixed",
    name: str = "bit_string_classifier",
) -> keras.Model:
    """Builds the learned PARITY or FIRST classifier of the paper.

    The defaults are the official code's FIRST experiment: 2 post-norm
    layers, 1 head, size 16, feed-forward size 64, layer-norm epsilon
    `1e-5`, a learned embedding initialised like PyTorch's (unit normal),
    and, for FIRST, the single positional feature `[i = 1]`.

    Args:
        task: `"first"` (CLS first, output read at position 0) or `"parity"`
            (CLS last, positional features `i / N` and `(-1)^i`).
        hidden_dim: int, model size.
        intermediate_dim: int, feed-forward hidden size.
        num_layers: int, number of encoder layers.
        num_heads: int, attention heads per layer.
        logit_scale: `"none"` or `"log_length"` (log-length scaled attention).
        layer_norm_epsilon: float, epsilon of the layer norms.
        positions: `"fixed"` (the task's `BitStringFeatures`) or
            `"learned_scale"` (`LearnedScalePositions`: `i / n · exp(γ)` and
            `cos(π i · exp(γ))` with learned `γ`, the official code's
            encoding of the length-generalisation runs).
        name: model name.

    Returns:
        A `keras.Model` from int tokens `(batch, n + 1)` to logits
        `(batch, 1)`, accepting any length.

    Example:

    >>> model = build_bit_string_classifier("first", logit_scale="log_length")
    >>> model(np.array([[2, 1, 0, 1]])).shape
    (1, 1)

    References:
        - [Chiang & Cholak, 2022](https://arxiv.org/abs/2202.12172)
    """
    if logit_scale not in LOGIT_SCALES:
        raise ValueError(
            f"`logit_scale` must be one of {LOGIT_SCALES}. Received: logit_scale={logit_scale!r}"
        )
    if positions not in POSITIONS:
        raise ValueError(
            f"`positions` must be one of {POSITIONS}. Received: positions={positions!r}"
        )
    num_layers = check_int("num_layers", num_layers)
    hidden_dim, num_heads = check_heads(hidden_dim, num_heads)
    tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
    unit_normal = keras.initializers.RandomNormal(stddev=1.0)
    embedding = CheckedEmbedding(
        3, hidden_dim, ids_name="tokens", embeddings_initializer=unit_normal, name="embedding"
    )
    embedded = embedding(tokens)  # (batch, length, hidden_dim)
    if positions == "fixed":
        encoding = BitStringFeatures(task, hidden_dim, include_tokens=False, name="positions")
    else:
        encoding = LearnedScalePositions(hidden_dim, name="positions")
    encoding = encoding(tokens)  # (batch, length, hidden_dim)
    x = keras.layers.Add(name="embedding_sum")([embedded, encoding])
    for index in range(num_layers):
        x = TransformerBlock(
            num_heads,
            intermediate_dim,
            normalize_first=False,
            layer_norm_epsilon=layer_norm_epsilon,
            activation="relu",
            attention_kwargs={"logit_scale": logit_scale},
            name=f"block_{index}",
        )(x)
    cls = x[:, -1] if task == "parity" else x[:, 0]  # (batch, hidden_dim)
    logits = keras.layers.Dense(1, name="output")(cls)
    return keras.Model(tokens, logits, name=name)


def bit_string_logits(model: keras.Model, tokens: np.ndarray, batch_size: int = 50) -> np.ndarray:
    """The logits of a bit-string classifier on many strings, a batch at a time.

    Calls `model(batch, training=False)` on consecutive batches, so that long
    strings never need one call on all of them.

    Args:
        model: a classifier from int tokens `(batch, n + 1)` to logits
            `(batch, 1)`, such as `build_bit_string_classifier` or the exact
            transformers return.
        tokens: int array `(strings, n + 1)`, as `make_bit_strings` returns.
        batch_size: int, strings per call.

    Returns:
        numpy float array `(strings,)`: positive where the model says 1.

    Example:

    >>> model = build_bit_string_classifier("first")
    >>> bit_string_logits(model, np.array([[2, 1, 0], [2, 0, 0], [2, 1, 1]]), batch_size=2).shape
    (3,)
    """
    batch_size = check_int("batch_size", batch_size)
    batches = [
        keras.ops.convert_to_numpy(model(tokens[start : start + batch_size], training=False))
        for start in range(0, len(tokens), batch_size)
    ]  # each (batch, 1)
    return np.concatenate(batches)[:, 0]  # (strings,)
