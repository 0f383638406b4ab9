"""Models built from keras_attn layers."""

from keras_attn.models.adavit import (
    AdaViT,
    AdaViTFastPath,
    FastPathResult,
    UsageTargetEarlyStopping,
    finetune_adavit,
    finetune_vit,
    pretrain_vit,
)
from keras_attn.models.bert_encoder import build_bert_encoder
from keras_attn.models.bit_string_classifier import bit_string_logits, build_bit_string_classifier
from keras_attn.models.bsarec import build_bsarec, build_sasrec
from keras_attn.models.decoder_language_model import build_decoder_language_model
from keras_attn.models.exact_formal_languages import (
    build_exact_first_transformer,
    build_exact_parity_transformer,
)
from keras_attn.models.logsparse_forecaster import build_logsparse_forecaster
from keras_attn.models.macs import count_macs, layer_macs, register_macs
from keras_attn.models.t2t_vit import T2T_VIT_VARIANTS, build_t2t_vit
from keras_attn.models.vision_transformer import VIT_VARIANTS, build_vision_transformer

__all__ = [
    "AdaViT",
    "AdaViTFastPath",
    "FastPathResult",
    "T2T_VIT_VARIANTS",
    "UsageTargetEarlyStopping",
    "VIT_VARIANTS",
    "bit_string_logits",
    "build_bert_encoder",
    "build_bit_string_classifier",
    "build_bsarec",
    "build_decoder_language_model",
    "build_exact_first_transformer",
    "build_exact_parity_transformer",
    "build_logsparse_forecaster",
    "build_sasrec",
    "build_t2t_vit",
    "build_vision_transformer",
    "count_macs",
    "finetune_adavit",
    "finetune_vit",
    "layer_macs",
    "pretrain_vit",
    "register_macs",
]
