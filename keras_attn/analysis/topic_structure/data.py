"""The data of the topic-structure study: LDA documents and their masking.

Documents are drawn from a latent Dirichlet allocation (LDA) model whose
topics own disjoint sets of words (Li, Li & Risteski, ICML 2023,
https://arxiv.org/abs/2303.04245).
"""

import dataclasses

import numpy as np

from keras_attn._typing import Tensor
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
