"""The statistics of the topic-structure study, and a callback recording them.

What the word embeddings, the value matrix and the attention weights of a
model from `build_topic_model` have learned of the topics.
"""

from collections.abc import Callable, Iterable
from typing import Any

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.analysis.topic_structure.data import PAD_ID
from keras_attn.kernels import runtime


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

    return runtime.graph_function(attention_weights)


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


def take_off_step(
    history: list[dict[str, Any]], statistic: Callable[[dict[str, Any]], float]
) -> int | None:
    """The first recorded step at which a statistic reaches half of its final value.

    Args:
        history: records with a `"step"` key, in step order, such as the
            history of `TopicStatisticsCallback`.
        statistic: function from a record to the value followed.

    Returns:
        The step as an int, or `None` if no record reaches half the final value.

    Example:

    >>> history = [{"step": s, "x": v} for s, v in [(0, 0.0), (2, 1.0), (4, 2.5), (8, 4.0)]]
    >>> take_off_step(history, lambda record: record["x"])
    4
    """
    values = np.array([statistic(record) for record in history])
    steps = [record["step"] for record in history]
    reached = np.flatnonzero(values >= 0.5 * values[-1])
    return int(steps[reached[0]]) if len(reached) else None
