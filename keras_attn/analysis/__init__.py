"""Analysis tools: feed-forward key-value memories and topic structure in attention."""

from keras_attn.analysis.ffn_memories import (
    FeedForwardSite,
    MemoryAnalysis,
    analyze_memories,
    memory_coefficients,
    transformer_block_sites,
    value_top_tokens,
    value_vocabulary_distributions,
)
from keras_attn.analysis.topic_structure import (
    TopicCorpus,
    TopicStatisticsCallback,
    attention_topic_statistics,
    block_gap,
    build_topic_model,
    generate_lda_documents,
    mask_tokens,
    topic_statistics,
    train_topic_model,
    value_word_matrix,
)

__all__ = [
    "FeedForwardSite",
    "MemoryAnalysis",
    "TopicCorpus",
    "TopicStatisticsCallback",
    "analyze_memories",
    "attention_topic_statistics",
    "block_gap",
    "build_topic_model",
    "generate_lda_documents",
    "mask_tokens",
    "memory_coefficients",
    "topic_statistics",
    "train_topic_model",
    "transformer_block_sites",
    "value_top_tokens",
    "value_vocabulary_distributions",
    "value_word_matrix",
]
