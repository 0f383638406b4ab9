"""Analysis tools: attention weight products, feed-forward key-value memories, topic
structure in attention and linear probes."""

from keras_attn.analysis.attention_products import (
    attention_diagonal_statistics,
    diagonal_statistics,
    query_key_products,
    value_output_products,
)
from keras_attn.analysis.ffn_memories import (
    FeedForwardSite,
    MemoryAnalysis,
    analyze_memories,
    memory_coefficients,
    transformer_block_sites,
    value_top_tokens,
    value_vocabulary_distributions,
)
from keras_attn.analysis.linear_probe import fit_linear_probe
from keras_attn.analysis.topic_structure import (
    CONFIGURATIONS as CONFIGURATIONS,  # the former name, kept for one release
)
from keras_attn.analysis.topic_structure import (
    TOPIC_CONFIGURATIONS,
    TopicCorpus,
    TopicStatisticsCallback,
    attention_topic_statistics,
    block_gap,
    build_topic_model,
    generate_lda_documents,
    mask_tokens,
    topic_pair_means,
    topic_statistics,
    train_topic_model,
    value_word_matrix,
    word_embeddings,
)

__all__ = [
    "FeedForwardSite",
    "MemoryAnalysis",
    "TOPIC_CONFIGURATIONS",
    "TopicCorpus",
    "TopicStatisticsCallback",
    "analyze_memories",
    "attention_diagonal_statistics",
    "attention_topic_statistics",
    "block_gap",
    "build_topic_model",
    "diagonal_statistics",
    "fit_linear_probe",
    "generate_lda_documents",
    "mask_tokens",
    "memory_coefficients",
    "query_key_products",
    "topic_pair_means",
    "topic_statistics",
    "train_topic_model",
    "transformer_block_sites",
    "value_output_products",
    "value_top_tokens",
    "value_vocabulary_distributions",
    "value_word_matrix",
    "word_embeddings",
]
