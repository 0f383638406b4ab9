"""A NumPy reference of AdaViT inference that skips work, for tests only.

Computes, in NumPy, only what the decisions of an `AdaViT` keep: the kept
tokens gathered, the attention kernels sliced to the kept heads, the
sub-layers that are off skipped. It is an independent second computation to
check `AdaViTFastPath` and the masked path against; it cannot be compiled,
run on an accelerator or exported.
"""

import math

import keras
import numpy as np

from keras_attn.layers import ClassToken, PatchEmbedding
from keras_attn.testing.reference import layer_norm, numpy_activation
from keras_attn.utils.numpy_math import softmax


class AdaViTNumpyReference:
    """NumPy inference of an `AdaViT` that computes only what is kept.

    Per gated block, the kept tokens of the examples whose attention (or
    MLP) is on are gathered, kept tokens first, into a `(examples, n, dim)`
    array, `n` the largest kept count among them, so that a batch of one
    computes exactly its kept tokens; the query, key, value and output
    kernels are sliced to the heads that any of these examples keeps. The
    result is scattered back; dropped tokens pass unchanged. The outputs
    equal the masked path's (`AdaViT.__call__`) up to float rounding.

    The weights are copied when the engine is made: make a new one after
    training further. Backbones from `build_vision_transformer` run
    entirely in NumPy; other stems and readouts run through Keras.

    Args:
        model: a built `AdaViT`.

    References:
        - [Meng et al., 2022](https://arxiv.org/abs/2111.15668)
    """

    def __init__(self, model):
        if not model.built:
            raise ValueError("`model` must be built. Received: model with built=False")
        self.model = model
        self.blocks = [_block_weights(block) for block in model.blocks]
        self.first_gated = model.first_gated
        self.gates = [
            {
                "patch_norm": _norm_weights(block.attention_norm),
                "patches": _numpy(patch.kernel)[:, 0],
                "patches_bias": float(_numpy(patch.bias)[0]),
            }
            for patch, block in zip(model.patch_gates, model.gated_blocks, strict=True)
        ]
        for index, (head, gate) in enumerate(zip(model.head_gates, model.block_gates, strict=True)):
            self.gates[index + 1 - self.first_gated].update(
                heads=_numpy(head.kernel),
                heads_bias=_numpy(head.bias),
                blocks=_numpy(gate.kernel),
                blocks_bias=_numpy(gate.bias),
            )
        # An off head's MLP input channels, `(heads, dim)`, or `None`.
        dim, heads = model.stem.output.shape[-1], model.num_heads
        self.head_channels = (
            np.repeat(np.eye(heads, dtype=bool), dim // heads, axis=1)
            if model.head_gates_mlp_input
            else None
        )
        self.thresholds = {
            "patches": _logit(model.patch_threshold),
            "heads": _logit(model.head_threshold),
            "blocks": _logit(model.block_threshold),
        }
        self.stem = _numpy_stem(model.stem)
        self.readout = _numpy_readout(model.backbone)
        first = self.blocks[0]
        self.tokens = model.stem.output.shape[1]
        self.shape = {
            "hidden_dim": first["query"].shape[0],
            "heads": first["query"].shape[1],
            "key_dim": first["query"].shape[2],
            "value_dim": first["value"].shape[2],
            "intermediate_dim": first["mlp_hidden"].shape[1],
        }

    def predict(self, images, decisions=None):
        """Runs the model, skipping what the decisions leave out.

        Args:
            images: numpy batch of the backbone's input.
            decisions: optional fixed decisions (see `AdaViT.decide`); by
                default the gates decide, as in the masked path.

        Returns:
            `(outputs, decisions)`: `(batch, classes)` numpy outputs and the
            decisions used, as `AdaViT.decide` returns them.
        """
        images = np.asarray(images, "float32")
        x = self._stem(images)  # (batch, tokens, dim)
        for block in self.blocks[: self.first_gated]:
            x = self._run_block(block, x, _all_kept(len(x), self.tokens, self.shape["heads"]))
        used = {"patches": [], "heads": [], "attention": [], "mlp": []}
        for index, block in enumerate(self.blocks[self.first_gated :]):
            if decisions is None:
                step = self._decide(index, x)
            else:
                step = {key: np.asarray(value[:, index], bool) for key, value in decisions.items()}
            x = self._run_block(block, x, step)
            for key, value in step.items():
                used[key].append(value)
        used = {key: np.stack(values, axis=1) for key, values in used.items()}
        return self._readout(x), used

    def predict_full(self, images):
        """The backbone alone: every block in full, no gate computed."""
        x = self._stem(np.asarray(images, "float32"))
        for block in self.blocks:
            x = self._run_block(block, x, _all_kept(len(x), self.tokens, self.shape["heads"]))
        return self._readout(x)

    def _run_block(self, block, x, decisions):
        """One pre-norm block on the kept tokens and heads; updates `x` in place."""
        kept = np.concatenate([np.ones_like(decisions["patches"][:, :1]), decisions["patches"]], 1)
        order = np.argsort(~kept, axis=1, kind="stable")  # (batch, tokens), kept tokens first
        counts = kept.sum(1)  # (batch,)
        _attention_branch(block, x, decisions, order, counts)
        channels = None
        if self.head_channels is not None:  # the channels of the kept heads, (batch, dim)
            channels = (decisions["heads"][:, :, None] & self.head_channels).any(axis=1)
        _mlp_branch(block, x, decisions["mlp"], order, counts, channels)
        return x

    def _stem(self, images):
        if self.stem is None:
            return np.array(keras.ops.convert_to_numpy(self.model.stem(images)))  # writable
        return self.stem(images)

    def _readout(self, x):
        if self.readout is None:
            return keras.ops.convert_to_numpy(self.model.readout(x))
        return self.readout(x)

    def _decide(self, index, x):
        gate = self.gates[index]
        cls = x[:, 0]  # (batch, dim)
        if "blocks" in gate:
            blocks = cls @ gate["blocks"] + gate["blocks_bias"] > self.thresholds["blocks"]
            heads = cls @ gate["heads"] + gate["heads_bias"] > self.thresholds["heads"]
        else:  # the first block: no head or block gate
            blocks = np.ones((len(x), 2), bool)
            heads = np.ones((len(x), self.shape["heads"]), bool)
        return {
            "patches": layer_norm(x[:, 1:], *gate["patch_norm"]) @ gate["patches"]
            + gate["patches_bias"]
            > self.thresholds["patches"],  # (batch, patches)
            "heads": heads,
            "attention": blocks[:, 0],
            "mlp": blocks[:, 1],
        }


def _gather(x, examples, order, counts):
    """Kept tokens of `examples`, kept first: `(examples, n)` indices and validity."""
    length = counts[examples].max()
    rows = examples[:, None]  # (examples, 1)
    columns = order[examples, :length]  # (examples, n)
    valid = np.arange(length)[None] < counts[examples][:, None]  # (examples, n)
    return rows, columns, valid


def _attention_branch(block, x, decisions, order, counts):
    examples = np.flatnonzero(decisions["attention"])
    if examples.size == 0:
        return
    rows, columns, valid = _gather(x, examples, order, counts)
    heads = decisions["heads"][examples]  # (examples, heads)
    kept_heads = np.flatnonzero(heads.any(0))
    tokens = layer_norm(x[rows, columns], *block["attention_norm"])  # (examples, n, dim)
    update = np.broadcast_to(block["output_bias"], tokens.shape)
    if kept_heads.size:
        context = _attention(block, tokens, valid, kept_heads)  # (examples, h, n, value_dim)
        context = context * heads[:, kept_heads][:, :, None, None]
        batch, _, length, value_dim = context.shape
        context = context.transpose(0, 2, 1, 3).reshape(batch, length, -1)  # (b, n, h * v)
        output = block["output"][kept_heads]  # (h, value_dim, dim)
        output = output.reshape(-1, output.shape[-1])  # (h * value_dim, dim)
        update = context @ output + block["output_bias"]  # (examples, n, dim)
    x[rows, columns] += update * valid[..., None]


def _attention(block, tokens, valid, heads):
    query = _project(tokens, block["query"], block["query_bias"], heads)  # (b, h, n, key_dim)
    key = _project(tokens, block["key"], block["key_bias"], heads)  # (b, h, n, key_dim)
    value = _project(tokens, block["value"], block["value_bias"], heads)  # (b, h, n, value_dim)
    logits = query @ key.transpose(0, 1, 3, 2) * block["scale"]  # (b, h, n, n)
    if block["log_length"]:  # the log of each example's kept-token count
        logits = logits * np.log(valid.sum(-1))[:, None, None, None]
    if block["causal"]:
        valid = valid[:, None, :] & np.tri(valid.shape[1], dtype=bool)  # (b, n, n)
    else:
        valid = valid[:, None, :]  # (b, 1, n)
    if block["additive_mask"] is None:
        logits = np.where(valid[:, None], logits, -np.inf)
    else:
        logits = logits + np.where(valid[:, None], 0.0, block["additive_mask"])
    return softmax(logits) @ value  # (b, h, n, value_dim)


def _project(tokens, kernel, bias, heads):
    """`tokens @ kernel` for the kept heads, `(b, h, n, k)`."""
    dim, _, size = kernel.shape
    projected = tokens @ kernel[:, heads].reshape(dim, heads.size * size)  # (b, n, h * k)
    if bias is not None:
        projected = projected + bias[heads].reshape(-1)  # (h * k,)
    batch, length = tokens.shape[:2]
    projected = projected.reshape(batch, length, heads.size, size)  # (b, n, h, k)
    return projected.transpose(0, 2, 1, 3)


def _mlp_branch(block, x, mlp_on, order, counts, channels):
    """The MLP on the kept tokens, its input zero outside `channels` `(batch, dim)` if given."""
    examples = np.flatnonzero(mlp_on)
    if examples.size == 0:
        return
    rows, columns, valid = _gather(x, examples, order, counts)
    tokens = layer_norm(x[rows, columns], *block["mlp_norm"])  # (examples, n, dim)
    if channels is not None:
        tokens = tokens * channels[examples][:, None, :]
    hidden = block["activation"](tokens @ block["mlp_hidden"] + block["mlp_hidden_bias"])
    update = hidden @ block["mlp_output"] + block["mlp_output_bias"]  # (examples, n, dim)
    x[rows, columns] += update * valid[..., None]


def _all_kept(batch, tokens, heads):
    return {
        "patches": np.ones((batch, tokens - 1), bool),
        "heads": np.ones((batch, heads), bool),
        "attention": np.ones((batch,), bool),
        "mlp": np.ones((batch,), bool),
    }


def _block_weights(block):
    attention = block.attention
    config = attention.get_config()
    if attention.is_sparse:
        raise ValueError(
            "The reference supports the dense patterns only. "
            f"Received: attention_pattern={attention.attention_pattern!r}"
        )
    weights = {
        # The logit factor read from the configuration, as the paper code sets it.
        "scale": config["qk_scale"] or config["key_dim"] ** -0.5,
        "log_length": config["logit_scale"] == "log_length",
        "causal": config["attention_pattern"] == "causal",
        "additive_mask": config["additive_mask"],
        "attention_norm": _norm_weights(block.attention_norm),
        "mlp_norm": _norm_weights(block.mlp_norm),
        "mlp_hidden": _numpy(block.mlp_hidden.kernel),
        "mlp_hidden_bias": _numpy(block.mlp_hidden.bias),
        "mlp_output": _numpy(block.mlp_output.kernel),
        "mlp_output_bias": _numpy(block.mlp_output.bias),
        "activation": numpy_activation(block.mlp_hidden.activation),
    }
    for name, dense in (
        ("query", attention.query_dense),
        ("key", attention.key_dense),
        ("value", attention.value_dense),
        ("output", attention.output_dense),
    ):
        weights[name] = _numpy(dense.kernel)
        weights[f"{name}_bias"] = _numpy(dense.bias) if attention.use_bias else None
    if weights["output_bias"] is None:
        weights["output_bias"] = np.zeros(weights["output"].shape[-1], "float32")
    return weights


def _norm_weights(norm):
    return (_numpy(norm.gamma), _numpy(norm.beta), norm.epsilon)


def _numpy_stem(stem):
    """Images to tokens in NumPy for a `build_vision_transformer` stem, else `None`."""
    layers = [layer for layer in stem.layers if not isinstance(layer, keras.layers.InputLayer)]
    kinds = [type(layer) for layer in layers[:2]]
    if len(layers) != 3 or kinds != [PatchEmbedding, ClassToken]:
        return None
    embedding, class_token, position = layers
    kernel = _numpy(embedding.projection.kernel)  # (patch, patch, channels, dim)
    bias = _numpy(embedding.projection.bias)
    token = _numpy(class_token.token)
    length = 1 + np.prod([s // embedding.patch_size for s in stem.input.shape[1:3]])
    positions = keras.ops.convert_to_numpy(position(np.zeros((1, length, token.size), "float32")))
    patch = embedding.patch_size

    def run(images):
        images = images if images.ndim == 4 else images[..., None]
        batch, height, width, channels = images.shape
        # (batch, rows, patch, columns, patch, channels)
        grid = images.reshape(batch, height // patch, patch, width // patch, patch, channels)
        grid = grid.transpose(0, 1, 3, 2, 4, 5)  # (batch, rows, columns, patch, patch, channels)
        patches = grid.reshape(batch, -1, patch * patch * channels)  # (batch, patches, features)
        embedded = patches @ kernel.reshape(-1, kernel.shape[-1]) + bias  # (batch, patches, dim)
        cls = np.broadcast_to(token, (batch, 1, token.size))
        return np.concatenate([cls, embedded], axis=1) + positions  # (batch, tokens, dim)

    return run


def _numpy_readout(backbone):
    """Final norm, class token, dense head and softmax in NumPy, else `None`."""
    names = [layer.name for layer in backbone.layers]
    if not {"final_norm", "head"} <= set(names) or names[-1] != "probabilities":
        return None
    norm = _norm_weights(backbone.get_layer("final_norm"))
    head = backbone.get_layer("head")
    kernel, bias = _numpy(head.kernel), _numpy(head.bias)

    def run(x):
        return softmax(layer_norm(x[:, 0], *norm) @ kernel + bias)  # (batch, classes)

    return run


def _numpy(variable):
    return np.asarray(keras.ops.convert_to_numpy(variable), "float32")


def _logit(probability):
    """`sigmoid(z) > p` exactly when `z > log(p / (1 - p))`."""
    return math.log(probability / (1.0 - probability))
