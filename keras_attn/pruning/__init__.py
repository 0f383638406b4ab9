"""Head importance and head pruning (Michel et al., 2019).

`head_importance` scores every attention head of a model by the gradient of
the loss with respect to a mask on the head; `select_heads` picks the heads
to remove in a global order; `prune_heads` really removes them, returning a
smaller model. They work on `keras_attn.layers.MultiHeadSelfAttention` and
`keras.layers.MultiHeadAttention`, which share their kernel layout.
"""

from keras_attn.pruning.attention_layers import attention_layers
from keras_attn.pruning.head_importance import head_importance
from keras_attn.pruning.prune_heads import prune_heads
from keras_attn.pruning.select_heads import select_heads

__all__ = ["attention_layers", "head_importance", "prune_heads", "select_heads"]
