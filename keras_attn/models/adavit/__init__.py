"""AdaViT (Meng et al., CVPR 2022): the model, its decisions, its fast path and its training.

AdaViT: Adaptive Vision Transformers for Efficient Image Recognition,
https://arxiv.org/abs/2111.15668.
"""

from keras_attn.models.adavit.decisions import DECISION_KEYS
from keras_attn.models.adavit.fast_path import (
    AdaViTFastPath,
    FastPathResult,
    inference_function,
    xla_function,
)
from keras_attn.models.adavit.model import FORMER_BEHAVIOUR, AdaViT
from keras_attn.models.adavit.training import finetune_adavit, finetune_vit, pretrain_vit
from keras_attn.models.adavit.usage_target_early_stopping import UsageTargetEarlyStopping

__all__ = [
    "DECISION_KEYS",
    "FORMER_BEHAVIOUR",
    "AdaViT",
    "AdaViTFastPath",
    "FastPathResult",
    "UsageTargetEarlyStopping",
    "finetune_adavit",
    "finetune_vit",
    "inference_function",
    "pretrain_vit",
    "xla_function",
]
