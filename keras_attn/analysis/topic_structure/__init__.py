"""How transformers learn topic structure (Li, Li & Risteski, ICML 2023).

Documents are drawn from a latent Dirichlet allocation (LDA) model whose
topics own disjoint sets of words. A one-layer, one-head attention model
without residual connection or feed-forward layer is trained with masked
language modelling. The paper shows that the word embeddings and the value
matrix learn the topic blocks first, and the attention then moves from
uniform to same-topic words: at the end a word attends more than `1/n`
to each same-topic word and less than `1/n` to each other word.

The package has the data generator (`data`), the model in two
configurations and its training (`model`), and the statistics with a
callback that records them during training (`statistics`).

Reference: Li, Li, Risteski. "How Do Transformers Learn Topic Structure:
Towards a Mechanistic Understanding". ICML 2023.
https://arxiv.org/abs/2303.04245
"""

from keras_attn.analysis.topic_structure.data import (
    FIRST_WORD_ID,
    MASK_ID,
    PAD_ID,
    TopicCorpus,
    generate_lda_documents,
    mask_tokens,
)
from keras_attn.analysis.topic_structure.model import (
    CONFIGURATIONS as CONFIGURATIONS,  # the former name, kept for one release
)
from keras_attn.analysis.topic_structure.model import (
    TOPIC_CONFIGURATIONS,
    build_topic_model,
    train_topic_model,
)
from keras_attn.analysis.topic_structure.statistics import (
    TopicStatisticsCallback,
    attention_topic_statistics,
    block_gap,
    take_off_step,
    topic_pair_means,
    topic_statistics,
    value_word_matrix,
    word_embeddings,
)

__all__ = [
    "FIRST_WORD_ID",
    "MASK_ID",
    "PAD_ID",
    "TOPIC_CONFIGURATIONS",
    "TopicCorpus",
    "TopicStatisticsCallback",
    "attention_topic_statistics",
    "block_gap",
    "build_topic_model",
    "generate_lda_documents",
    "mask_tokens",
    "take_off_step",
    "topic_pair_means",
    "topic_statistics",
    "train_topic_model",
    "value_word_matrix",
    "word_embeddings",
]
