"""Head importance and head pruning (Michel et al., 2019).

`head_importance` scores every attention head of a model by the gradient of
the loss with respect to a mask on the head; `select_heads` picks the heads
to remove in a global order; `prune_heads` really removes them, returning a
smaller model. `pruning_curve`, `iterative_pruning` and
`single_head_ablations` measure a model's quality as heads go, and
`measure_throughput` times the pruned models. They work on
`keras_attn.layers.MultiHeadSelfAttention` and
`keras.layers.MultiHeadAttention` (KerasHub's backbones included), which
share their kernel layout, on every backend, and find them with
`attention_layers` (`keras_attn.utils.find_attention_layers`) in model order.
"""

from keras_attn.pruning.attention_layers import attention_layers
from keras_attn.pruning.head_importance import head_importance
from keras_attn.pruning.iterative_pruning import (
    head_mask_array,
    iterative_pruning,
    pruning_curve,
    scores_of_kept_heads,
    single_head_ablations,
)
from keras_attn.pruning.prune_heads import prune_heads
from keras_attn.pruning.select_heads import select_heads
from keras_attn.pruning.throughput import measure_throughput, pruned_models

__all__ = [
    "attention_layers",
    "head_importance",
    "head_mask_array",
    "iterative_pruning",
    "measure_throughput",
    "prune_heads",
    "pruned_models",
    "pruning_curve",
    "scores_of_kept_heads",
    "select_heads",
    "single_head_ablations",
]
