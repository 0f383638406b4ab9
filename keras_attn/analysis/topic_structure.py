"""How transformers learn topic structure (Li, Li & Risteski, ICML 2023).

Documents are drawn from a latent Dirichlet allocation (LDA) model whose
topics own disjoint sets of words. A one-layer, one-head attention model
without residual connection or feed-forward layer is trained with masked
language modelling. The paper shows that the word embeddings and the value
matrix learn the topic blocks first, and the attention then moves from
uniform to same-topic words: at the end a word attends more than `1/n`
to each same-topic word and less than `1/n` to each other word.

This module has the data generator, the model (on the library's
`MultiHeadSelfAttention`) in two configurations, "joint" (everything
trained) and "official" (the official code's: frozen one-hot embeddings,
attention frozen uniform, decoder fixed to the identity), the statistics
and a callback that records them during training.

Reference: Li, Li, Risteski. "How Do Transformers Learn Topic Structure:
Towards a Mechanistic Understanding". ICML 2023.
https://arxiv.org/abs/2303.04245
"""

import dataclasses
from collections.abc import Iterable
from typing import Any, Literal

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.layers import CheckedEmbedding, MultiHeadSelfAttention
from keras_attn.utils.training import build_optimizer
from keras_attn.utils.validation import check_int

PAD_ID = 0
"""Padding token id (masked out of the attention)."""

MASK_ID = 1
"""Id of the `[MASK]` token."""

FIRST_WORD_ID = 2
"""Id of the first word; word `w` of topic `t` is `FIRST_WORD_ID + t * words_per_topic + w`."""


@dataclasses.dataclass(frozen=True)
class TopicCorpus:
    """Documents drawn from the LDA model.

    Attributes:
        tokens: `(num_documents, max_length)` int32 token ids, padded with
            `PAD_ID` at the end.
        lengths: `(num_documents,)` document lengths.
        topic_proportions: `(num_documents, num_topics)` the sampled θ.
        num_topics: int.
        words_per_topic: int.
    """

    tokens: np.ndarray
    lengths: np.ndarray
    topic_proportions: np.ndarray
    num_topics: int
    words_per_topic: int

    @property
    def vocabulary_size(self):
        """Number of token ids: padding, `[MASK]` and the words."""
        return FIRST_WORD_ID + self.num_topics * self.words_per_topic

    @property
    def word_topics(self):
        """`(vocabulary_size,)` topic of each token id; -1 for padding and `[MASK]`."""
        topics = np.full(self.vocabulary_size, -1)
        topics[FIRST_WORD_ID:] = np.arange(self.num_topics * self.words_per_topic) // (
            self.words_per_topic
        )
        return topics


def generate_lda_documents(
    num_documents: int,
    num_topics: int = 10,
    words_per_topic: int = 10,
    alpha: float = 0.1,
    length_range: tuple[int, int] = (100, 150),
    seed: int = 0,
) -> TopicCorpus:
    """Samples documents from the LDA model of the paper.

    Each topic is uniform over its own `words_per_topic` words (topics do not
    share words). A document draws θ ~ Dirichlet(α), a length uniformly in
    `length_range` (both ends included), then for each word a topic from θ
    and a word of that topic.

    Args:
        num_documents: int, documents to draw (10,000 per split in the paper).
        num_topics: int, number of topics (10).
        words_per_topic: int, words owned by each topic (10).
        alpha: float, Dirichlet concentration (0.1).
        length_range: `(min, max)` document length (100, 150).
        seed: int, seed of the generator.

    Returns:
        A `TopicCorpus`.

    Example:

    >>> corpus = generate_lda_documents(4, seed=1)
    >>> corpus.tokens.shape, corpus.vocabulary_size
    ((4, 150), 102)
    """
    num_documents = check_int("num_documents", num_documents)
    num_topics = check_int("num_topics", num_topics)
    words_per_topic = check_int("words_per_topic", words_per_topic)
    if not alpha > 0:
        raise ValueError(f"`alpha` must be positive. Received: alpha={alpha!r}")
    low, high = length_range
    if not 1 <= low <= high:
        raise ValueError(
            f"`length_range` must be (min, max) with 1 <= min <= max. "
            f"Received: length_range={length_range!r}"
        )
    rng = np.random.default_rng(seed)
    theta = rng.dirichlet(np.full(num_topics, alpha), size=num_documents)  # (docs, topics)
    lengths = rng.integers(low, high + 1, size=num_documents)
    tokens = np.full((num_documents, high), PAD_ID, dtype=np.int32)
    for index, (proportions, length) in enumerate(zip(theta, lengths, strict=True)):
        topics = rng.choice(num_topics, size=length, p=proportions)
        words = rng.integers(0, words_per_topic, size=length)
        tokens[index, :length] = FIRST_WORD_ID + topics * words_per_topic + words
    return TopicCorpus(tokens, lengths, theta, num_topics, words_per_topic)


def mask_tokens(
    tokens: Tensor, vocabulary_size: int, rng: np.random.Generator, rate: float = 0.15
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """BERT-style masking: `rate` of the words become targets (80/10/10).

    Of the chosen positions, 80% show `[MASK]`, 10% a random word and 10%
    the original word. Padding is never chosen.

    Args:
        tokens: `(batch, length)` int token ids.
        vocabulary_size: int, to draw random words in `[FIRST_WORD_ID, vocabulary_size)`.
        rng: `numpy.random.Generator`.
        rate: float in (0, 1), share of words to predict.

    Returns:
        `(inputs, targets, weights)`: the corrupted tokens, the original
        tokens, and float32 weights that are 1 at the chosen positions.
    """
    if not 0.0 < rate < 1.0:
        raise ValueError(f"`rate` must be in (0, 1). Received: rate={rate!r}")
    tokens = np.asarray(tokens)
    chosen = (rng.random(tokens.shape) < rate) & (tokens != PAD_ID)
    draw = rng.random(tokens.shape)
    random_words = rng.integers(FIRST_WORD_ID, vocabulary_size, size=tokens.shape)
    inputs = np.where(chosen & (draw < 0.8), MASK_ID, tokens)
    inputs = np.where(chosen & (draw >= 0.8) & (draw < 0.9), random_words, inputs)
    return inputs.astype(np.int32), tokens.astype(np.int32), chosen.astype(np.float32)


CONFIGURATIONS = ("joint", "official")
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
        configuration: one of `CONFIGURATIONS`.

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
    if configuration not in CONFIGURATIONS:
        raise ValueError(
            f"`configuration` must be one of {CONFIGURATIONS}. "
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


def word_embeddings(model: keras.Model) -> np.ndarray:
    """`(vocabulary, dim)`: what the model's embedding gives each token id alone."""
    vocabulary = model.get_layer("decoder").kernel.shape[-1]
    ids = np.arange(vocabulary, dtype="int32")[:, None]  # (vocabulary, 1)
    return keras.ops.convert_to_numpy(model.get_layer("embedding")(ids))[:, 0]


def value_word_matrix(model: keras.Model) -> np.ndarray:
    """`(vocabulary, vocabulary)` map from a key word to the logits it adds.

    `M = E W_v W_o D`, with `E` from `word_embeddings`: row `j` is how much
    attending fully to word `j` raises each output logit (biases left out).
    Its topic blocks are the paper's `W_v` block structure seen through the
    embedding and decoder; in the official configuration `W_o` and `D` are
    the identity.
    """
    attention = model.get_layer("attention")
    value = keras.ops.convert_to_numpy(attention.value_dense.kernel)[:, 0]  # (dim, head_dim)
    output = keras.ops.convert_to_numpy(attention.output_dense.kernel)[0]  # (head_dim, dim)
    decoder = keras.ops.convert_to_numpy(model.get_layer("decoder").kernel)  # (dim, vocab)
    return word_embeddings(model) @ value @ output @ decoder


def topic_pair_means(matrix: Tensor, topics: Tensor) -> tuple[float, float]:
    """Mean entry over same-topic pairs (off the diagonal) and over different-topic pairs.

    Args:
        matrix: `(vocabulary, vocabulary)` array over token ids.
        topics: `(vocabulary,)` topic of each id; ids with topic -1 (special
            tokens) are left out.

    Returns:
        `(same, different)`, two floats.

    Example:

    >>> import numpy as np
    >>> topic_pair_means(np.arange(9.0).reshape(3, 3), np.array([0, 0, 1]))
    (2.0, 5.0)
    """
    words = np.flatnonzero(topics >= 0)
    block = matrix[np.ix_(words, words)]
    same = topics[words][:, None] == topics[words][None, :]
    off_diagonal = ~np.eye(len(words), dtype=bool)
    return float(block[same & off_diagonal].mean()), float(block[~same].mean())


def block_gap(matrix: Tensor, topics: Tensor) -> float:
    """`(mean same-topic entry - mean different-topic entry) / std of all entries`.

    Args:
        matrix: `(vocabulary, vocabulary)` array over token ids.
        topics: `(vocabulary,)` topic of each id, -1 for special tokens.

    Returns:
        float; 0 when the matrix has no topic structure.
    """
    words = np.flatnonzero(topics >= 0)
    same, different = topic_pair_means(matrix, topics)
    scale = matrix[np.ix_(words, words)].std()
    return (same - different) / scale if scale > 0 else 0.0


def attention_topic_statistics(
    attention_weights: Tensor, tokens: Tensor, topics: Tensor
) -> dict[str, float]:
    """Mean attention a word pays to one same-topic and one different-topic word.

    For every query word, the weights on the other words of the document
    (itself excluded) are averaged separately over keys of the query's
    topic and keys of other topics; these are then averaged over queries.
    Uniform attention gives `1/n` to every key.

    Args:
        attention_weights: `(batch, length, length)` weights of one head.
        tokens: `(batch, length)` token ids (padding is `PAD_ID`).
        topics: `(vocabulary,)` topic of each id, -1 for special tokens.

    Returns:
        dict with `same_topic`, `different_topic`, `uniform` (mean `1/n`)
        and `same_topic_over_uniform`, `different_topic_over_uniform`: the
        same means with each query's weights multiplied by its document's
        `n` (1 for uniform attention, whatever the lengths).
    """
    return _TopicPairs(tokens, topics).statistics(attention_weights)


class _TopicPairs:
    """The same- and different-topic word pairs of a batch, for many weight arrays.

    Each selection is stored divided by its number of keys per query, so a
    query's mean weight over the selection is one weighted sum.
    """

    def __init__(self, tokens, topics):
        tokens = np.asarray(tokens)
        token_topics = np.asarray(topics)[tokens]  # (batch, length)
        is_word = token_topics >= 0
        pair = is_word[:, :, None] & is_word[:, None, :]
        pair &= ~np.eye(tokens.shape[1], dtype=bool)[None]  # (batch, length, length)
        same = pair & (token_topics[:, :, None] == token_topics[:, None, :])
        lengths = np.sum(tokens != PAD_ID, axis=1)  # (batch,)
        self.per_query = {}
        for name, selection in (("same_topic", same), ("different_topic", pair & ~same)):
            counts = selection.sum(axis=-1, keepdims=True)  # (batch, length, 1)
            self.per_query[name] = (selection / np.maximum(counts, 1), int((counts > 0).sum()))
            self.per_query[f"{name}_over_uniform"] = (
                self.per_query[name][0] * lengths[:, None, None],
                self.per_query[name][1],
            )
        self.uniform = float(np.mean(1.0 / lengths))

    def statistics(self, attention_weights):
        weights = np.asarray(attention_weights, dtype=np.float64)
        means = {
            name: float((weights * normalized).sum() / queries) if queries else np.nan
            for name, (normalized, queries) in self.per_query.items()
        }
        return {**means, "uniform": self.uniform}


def topic_statistics(model: keras.Model, tokens: Tensor, topics: Tensor) -> dict[str, float]:
    """All statistics of the model on a batch of clean documents.

    Args:
        model: a model from `build_topic_model` (either configuration).
        tokens: `(batch, length)` token ids, unmasked.
        topics: `(vocabulary,)` topic of each token id, -1 for special ids.

    Returns:
        dict: `embedding_same_topic` / `embedding_different_topic` (mean
        inner product of the words' embeddings, `word_embeddings`),
        `attention_same_topic` / `attention_different_topic` /
        `attention_uniform` and `attention_same_over_uniform` /
        `attention_different_over_uniform` (`attention_topic_statistics`,
        every word visible), and `value_block_gap` (`block_gap` of `value_word_matrix`).
    """
    weights = _attention_weights_function(model)(np.asarray(tokens, "int32"))
    pairs = _TopicPairs(tokens, topics)
    return _statistics(model, keras.ops.convert_to_numpy(weights), pairs, np.asarray(topics))


def _attention_weights_function(model):
    """A function from clean token ids to the attention weights `(batch, length, length)`.

    A `tf.function` on TensorFlow (the callback calls it at every step), a
    plain function on the other backends.
    """

    def attention_weights(tokens):
        x = model.get_layer("embedding")(tokens)  # (batch, length, dim)
        _, scores = model.get_layer("attention")(
            x, mask=keras.ops.not_equal(tokens, PAD_ID), return_attention_scores=True
        )  # (batch, 1, length, length)
        return scores[:, 0]

    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        return tf.function(attention_weights)
    return attention_weights


def _statistics(model, attention_weights, pairs, topics):
    embedding = word_embeddings(model)
    same, different = topic_pair_means(embedding @ embedding.T, topics)
    attention = pairs.statistics(attention_weights)
    return {
        "embedding_same_topic": same,
        "embedding_different_topic": different,
        "attention_same_topic": attention["same_topic"],
        "attention_different_topic": attention["different_topic"],
        "attention_uniform": attention["uniform"],
        "attention_same_over_uniform": attention["same_topic_over_uniform"],
        "attention_different_over_uniform": attention["different_topic_over_uniform"],
        "value_block_gap": float(block_gap(value_word_matrix(model), topics)),
    }


class TopicStatisticsCallback(keras.callbacks.Callback):
    """Records `topic_statistics` during training, at the given steps.

    Args:
        tokens: `(batch, length)` clean documents to measure attention on.
        topics: `(vocabulary,)` topic of each token id.
        steps: iterable of training steps (optimizer updates) after which to
            record; step 0 is before the first update.

    Attributes:
        history: list of dicts, each with `step` and the statistics.

    Example:

    ```python
    callback = TopicStatisticsCallback(corpus.tokens[:32], corpus.word_topics, range(0, 200, 10))
    model.fit(inputs, targets, sample_weight=weights, callbacks=[callback])
    callback.history[-1]["attention_same_topic"]
    ```
    """

    def __init__(self, tokens: Tensor, topics: Tensor, steps: Iterable[int]):
        super().__init__()
        self.steps = {int(step) for step in steps}
        if not self.steps or min(self.steps) < 0:
            raise ValueError(
                f"`steps` must be non-empty and non-negative. Received: steps={sorted(self.steps)}"
            )
        self.tokens = np.asarray(tokens, "int32")
        self.topics = np.asarray(topics)
        self.pairs = _TopicPairs(self.tokens, self.topics)
        self.history = []
        self.step = 0
        self._attention_weights = None

    def _record_if_scheduled(self):
        if self.step in self.steps and self.step not in {r["step"] for r in self.history}:
            sync = getattr(self.model, "jax_state_sync", None)
            if sync is not None:
                sync()  # JAX's `fit` keeps the weights out of the variables between steps.
            if self._attention_weights is None:
                self._attention_weights = _attention_weights_function(self.model)
            weights = keras.ops.convert_to_numpy(self._attention_weights(self.tokens))
            statistics = _statistics(self.model, weights, self.pairs, self.topics)
            self.history.append({"step": self.step, **statistics})

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        self._record_if_scheduled()

    def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
        self.step += 1
        self._record_if_scheduled()


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
