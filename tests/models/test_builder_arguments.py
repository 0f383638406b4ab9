"""Every public builder validates its sizes as the layers do (`check_int`, `check_heads`),
and AdaViT its gate and loss arguments."""

import functools
import re

import numpy as np
import pytest

from keras_attn.analysis.ffn_memories import analyze_memories
from keras_attn.analysis.topic_structure import generate_lda_documents
from keras_attn.layers import BSARecBlock, TransformerBlock
from keras_attn.models import (
    AdaViT,
    build_bert_encoder,
    build_bit_string_classifier,
    build_bsarec,
    build_decoder_language_model,
    build_logsparse_forecaster,
    build_sasrec,
    build_t2t_vit,
    build_vision_transformer,
)

SIZES = {"hidden_dim": 8, "num_layers": 1, "num_heads": 2}
BUILDERS = {
    "vision_transformer": functools.partial(
        build_vision_transformer, (8, 8), 3, intermediate_dim=8
    ),
    "t2t_vit": functools.partial(
        build_t2t_vit,
        (8, 8),
        3,
        variant=None,
        intermediate_dim=8,
        tokenizer="patches",
        patch_size=4,
    ),
    "bert_encoder": functools.partial(build_bert_encoder, 10, intermediate_dim=8),
    "bsarec": functools.partial(build_bsarec, 10, max_sequence_length=4),
    "sasrec": functools.partial(build_sasrec, 10, max_sequence_length=4),
    "decoder_language_model": functools.partial(
        build_decoder_language_model, 10, 4, intermediate_dim=8
    ),
    "logsparse_forecaster": functools.partial(build_logsparse_forecaster, 4, intermediate_dim=8),
    "bit_string_classifier": functools.partial(build_bit_string_classifier, intermediate_dim=8),
}


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_builder_takes_numpy_integers_and_refuses_bools_and_indivisible_widths(name):
    build = BUILDERS[name]
    model = build(**{**SIZES, "num_layers": np.int64(2), "num_heads": np.int64(2)})
    blocks = [layer for layer in model.layers if isinstance(layer, (BSARecBlock, TransformerBlock))]
    assert len(blocks) == 2
    with pytest.raises(ValueError, match=re.escape("Received: num_layers=True")):
        build(**{**SIZES, "num_layers": True})
    message = "`hidden_dim` must be divisible by `num_heads=4`. Received: hidden_dim=10"
    with pytest.raises(ValueError, match=re.escape(message)):
        build(**{**SIZES, "hidden_dim": 10, "num_heads": 4})


@pytest.mark.parametrize("build", [build_vision_transformer, build_t2t_vit])
def test_vision_builders_refuse_an_image_shape_of_one_size(build):
    with pytest.raises(ValueError, match=re.escape("Received: image_shape=(8,)")):
        build((8,), 10)


@pytest.mark.parametrize(
    "call, name",
    [
        (lambda value: generate_lda_documents(value, seed=0), "num_documents"),
        (lambda value: analyze_memories(None, [], None, top_k=value), "top_k"),
    ],
)
def test_analysis_sizes_use_the_shared_check(call, name):
    with pytest.raises(ValueError, match=re.escape(f"Received: {name}=True")):
        call(True)
    assert generate_lda_documents(np.int64(3), seed=0).tokens.shape[0] == 3


@pytest.mark.parametrize(
    "name, value",
    [
        ("temperature", 0.0),
        ("temperature", True),
        ("patch_threshold", 1.5),
        ("head_threshold", -0.1),
        ("block_threshold", 1.0),
        ("usage_loss_weight", -1.0),
        ("usage_loss_weight", True),
    ],
)
def test_adavit_checks_its_gate_and_loss_arguments(name, value):
    backbone = build_vision_transformer((8, 8), 3, patch_size=4, **{**SIZES, "num_layers": 2})
    with pytest.raises(ValueError, match=re.escape(f"Received: {name}={value!r}")):
        AdaViT(backbone, **{name: value})
