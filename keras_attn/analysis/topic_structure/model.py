"""The model of the topic-structure study and its masked-language-model training.

A one-layer, one-head attention model (on the library's
`MultiHeadSelfAttention`) without residual connection or feed-forward layer,
in two configurations, "joint" (everything trained) and "official" (the
official code's: frozen one-hot embeddings, attention frozen uniform, decoder
fixed to the identity).
"""

from collections.abc import Iterable
from typing import Literal

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.analysis.topic_structure.data import PAD_ID, TopicCorpus, mask_tokens
from keras_attn.analysis.topic_structure.statistics import TopicStatisticsCallback
from keras_attn.layers import CheckedEmbedding, MultiHeadSelfAttention
from keras_attn.utils.training import build_optimizer

TOPIC_CONFIGURATIONS = ("joint", "official")
"""`"joint"`: every weight trained. `"official"`: the official code's frozen configuration."""


def build_topic_model(
    vocabulary_size: int,
    hidden_dim: int | None = None,
    name: str = "topic_model",
    configuration: Literal["joint", "official"] = "joint",
) -> keras.Model:
    """The paper's one-layer, one-head masked language model.

    `logits = decoder(attention(embedding(tokens)))`: no residual
    connection, no feed-forward layer. The attention is the library's
    `MultiHeadSelfAttention` with one head; it attends to the positions
    where the `visible` input is true (the official data pipeline hides
    padding and the masked-out positions).

    Two configurations:

    - `"joint"`: a trained `hidden_dim`-wide embedding, attention without biases
      (its value and output kernels together play the paper's `W_v`) and a
      trained linear decoder. Everything is trained jointly.
    - `"official"`: the official code's configuration
      (`token_embedding_type: one_hot`, `freeze_uniform_attention`,
      `freeze_decoder_to_I`), width = vocabulary size. The token embedding
      is the frozen one-hot table; as in the official BERT embeddings, a
      trained segment vector (one segment, initialised N(0, 1) as the
      official model keeps PyTorch's default) is added and a trained layer
      norm (epsilon 1e-12) follows. Query and key kernels and biases are
      frozen at zero, so the attention is uniform over the visible
      positions; the value kernel and bias are trained (PyTorch's default
      initialisation, uniform in `±1/sqrt(width)`); there is no output
      projection (the core's is frozen to the identity, without bias) and
      the decoder is frozen to the identity.

    Args:
        vocabulary_size: int, number of token ids.
        hidden_dim: int, embedding and head size of the joint configuration.
            Defaults to `vocabulary_size`, as in the official configuration;
            the official configuration requires `vocabulary_size`.
        name: model name.
        configuration: one of `TOPIC_CONFIGURATIONS`.

    Returns:
        A `keras.Model` from `{"tokens": (batch, length) int, "visible":
        (batch, length) bool}` to `(batch, length, vocabulary_size)` logits,
        with layers `embedding` (a model from token ids to the attention's
        input), `attention` and `decoder`.

    Example:

    >>> model = build_topic_model(102, hidden_dim=16)
    >>> tokens = np.full((2, 5), 3, "int32")
    >>> model({"tokens": tokens, "visible": tokens > 0}).shape
    (2, 5, 102)
    """
    if configuration not in TOPIC_CONFIGURATIONS:
        raise ValueError(
            f"`configuration` must be one of {TOPIC_CONFIGURATIONS}. "
            f"Received: configuration={configuration!r}"
        )
    official = configuration == "official"
    dim = hidden_dim or vocabulary_size
    if official and dim != vocabulary_size:
        raise ValueError(
            "The official configuration's width is the vocabulary size (one-hot embeddings). "
            f"Received: hidden_dim={hidden_dim} with vocabulary_size={vocabulary_size}"
        )
    tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
    visible = keras.Input(shape=(None,), dtype="bool", name="visible")
    embedding = (_one_hot_embedding if official else _trained_embedding)(vocabulary_size, dim)
    attention = MultiHeadSelfAttention(1, dim, use_bias=official, name="attention")
    decoder = keras.layers.Dense(vocabulary_size, use_bias=False, name="decoder")
    # Keys hidden per pair rather than by a Keras mask, which would also drop
    # the hidden positions from the loss.
    keys = keras.ops.logical_and(
        keras.ops.expand_dims(keras.ops.ones_like(visible), 2),
        keras.ops.expand_dims(visible, 1),
    )  # (batch, length, length)
    x = attention(embedding(tokens), attention_mask=keys)  # (batch, length, dim)
    model = keras.Model({"tokens": tokens, "visible": visible}, decoder(x), name=name)
    if official:
        _freeze_official_attention_and_decoder(attention, decoder, dim)
    return model


def _trained_embedding(vocabulary_size, dim):
    tokens = keras.Input(shape=(None,), dtype="int32")
    x = CheckedEmbedding(vocabulary_size, dim, ids_name="tokens", name="token_embedding")(tokens)
    return keras.Model(tokens, x, name="embedding")  # (batch, length, dim)


def _one_hot_embedding(vocabulary_size, dim):
    tokens = keras.Input(shape=(None,), dtype="int32")
    one_hot = CheckedEmbedding(
        vocabulary_size,
        dim,
        ids_name="tokens",
        embeddings_initializer="identity",
        trainable=False,
        name="token_embedding",
    )(tokens)  # (batch, length, vocabulary)
    segment = keras.layers.Embedding(
        1, dim, embeddings_initializer=keras.initializers.RandomNormal(stddev=1.0), name="segment"
    )(keras.ops.zeros_like(tokens))  # (batch, length, vocabulary)
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="embedding_norm")(one_hot + segment)
    return keras.Model(tokens, x, name="embedding")


def _freeze_official_attention_and_decoder(attention, decoder, dim):
    bound = 1.0 / np.sqrt(dim)
    uniform = keras.initializers.RandomUniform(-bound, bound)
    value = attention.value_dense
    value.kernel.assign(uniform(value.kernel.shape))
    value.bias.assign(uniform(value.bias.shape))
    frozen = [
        (attention.query_dense.kernel, 0.0),
        (attention.query_dense.bias, 0.0),
        (attention.key_dense.kernel, 0.0),
        (attention.key_dense.bias, 0.0),
        (attention.output_dense.kernel, np.eye(dim)[None]),  # (1 head, head_dim, dim)
        (attention.output_dense.bias, 0.0),
        (decoder.kernel, np.eye(dim)),
    ]
    for variable, value in frozen:
        variable.assign(np.broadcast_to(value, variable.shape).astype(variable.dtype))
        variable.trainable = False


def train_topic_model(
    corpus: TopicCorpus,
    probe_tokens: Tensor,
    epochs: int,
    batch_size: int = 40,
    learning_rate: float = 0.01,
    record_steps: Iterable[int] | None = None,
    hidden_dim: int | None = None,
    seed: int = 0,
    configuration: Literal["joint", "official"] = "joint",
) -> tuple[keras.Model, list[dict[str, float]]]:
    """Trains `build_topic_model` with masked language modelling, recording statistics.

    As the official code: Adam (AdamW without decay), learning rate 0.01,
    batch 40, 15% of the words masked (80/10/10) once, before training,
    the masked positions hidden from the attention, and the loss on the
    masked positions only.

    Args:
        corpus: a `TopicCorpus` to train on.
        probe_tokens: `(batch, length)` held-out clean documents for the statistics.
        epochs: int, passes over the corpus.
        batch_size: int.
        learning_rate: float, Adam learning rate.
        record_steps: steps at which to record the statistics. Defaults to
            every step.
        hidden_dim: int, model width of the joint configuration (defaults to the
            vocabulary size).
        seed: int, seed of the weights, the masking and the batch order.
        configuration: `"joint"` or `"official"` (see `build_topic_model`).

    Returns:
        `(model, history)`: the trained model and the list of recorded
        statistics (see `TopicStatisticsCallback`).

    Example:

    ```python
    corpus = generate_lda_documents(2000)
    probe = generate_lda_documents(64, seed=1)
    model, history = train_topic_model(corpus, probe.tokens, epochs=2)
    ```
    """
    keras.utils.set_random_seed(seed)
    total = epochs * -(-len(corpus.tokens) // batch_size)
    record_steps = range(total + 1) if record_steps is None else [*record_steps, total]
    model = build_topic_model(
        corpus.vocabulary_size, hidden_dim=hidden_dim, configuration=configuration
    )
    model.compile(
        keras.optimizers.Adam(learning_rate),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=True,
    )
    build_optimizer(model)
    callback = TopicStatisticsCallback(probe_tokens, corpus.word_topics, record_steps)
    inputs, targets, weights = mask_tokens(
        corpus.tokens, corpus.vocabulary_size, np.random.default_rng(seed)
    )
    model.fit(
        {"tokens": inputs, "visible": (corpus.tokens != PAD_ID) & (weights == 0)},
        targets,
        sample_weight=weights,
        batch_size=batch_size,
        epochs=epochs,
        shuffle=True,
        verbose=0,
        callbacks=[callback],
    )
    return model, sorted(callback.history, key=lambda record: record["step"])


CONFIGURATIONS = TOPIC_CONFIGURATIONS  # the former name, kept for one release
