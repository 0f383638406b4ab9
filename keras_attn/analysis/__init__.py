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

__all__ = [
    "FeedForwardSite",
    "MemoryAnalysis",
    "analyze_memories",
    "memory_coefficients",
    "transformer_block_sites",
    "value_top_tokens",
    "value_vocabulary_distributions",
]
