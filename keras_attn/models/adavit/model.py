"""AdaViT: adaptive patch, head and block usage (Meng et al., CVPR 2022).

AdaViT: Adaptive Vision Transformers for Efficient Image Recognition,
https://arxiv.org/abs/2111.15668. A ViT backbone gets a decision network on
the input of its blocks: a patch gate on each patch token (from the first
block, as in the official code), and a head gate and a block gate (attention
and MLP) on the class token (from the second block). Training adds a usage
loss that pulls the mean usage to a target γ.
"""

from collections.abc import Mapping, Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.layers import GumbelSigmoidGate, TransformerBlock
from keras_attn.models.adavit.decisions import (
    DECISION_KEYS,
    check_decision_kinds,
    fixed_gates,
    random_keep,
)
from keras_attn.models.adavit.fast_path import AdaViTFastPath
from keras_attn.utils.validation import check_bool, check_float

FORMER_BEHAVIOUR = {
    "gate_first_block": False,
    "head_gates_mlp_input": False,
    "gated_drop_path": True,
}
"""`AdaViT` arguments that give keras_attn's behaviour before these options existed.

The official code's defaults are the opposite. `AdaViT.from_config` restores
these values for models saved before the options existed, and
`keras-attn reproduce adavit --former-behaviour OPTION` sets one of them to
measure its cost.
"""


@keras.saving.register_keras_serializable(package="keras_attn")
class AdaViT(keras.Model):
    """A ViT backbone with learned per-example patch, head and block usage.

    Every block decides from its input which patch tokens it processes
    (the class token always is); every block after the first also decides
    which attention heads run and whether its attention and MLP sub-layers
    run. A dropped patch passes the block unchanged and is no key of the
    attention; an off sub-layer adds nothing to the residual stream. An off
    head outputs zero and, as in the official code (`--ada-head` without
    `--ada-head-v2`, its `DynaLinear`), also zeroes its channels of the
    MLP's input: channel `c` of the width `dim` belongs to head
    `c // (dim / num_heads)`. This call is the masked path: it computes
    every token and head and multiplies by the decisions, as in training.
    `fast_path()` returns an inference engine that skips the work instead
    and gives the same outputs.

    The decisions cover the *gated blocks*: every block, or with
    `gate_first_block=False` every block but the first, which then runs in
    full. The first block has no head or block gate: its heads and
    sub-layers always run.

    With `training=True` the call adds the usage loss
    `w·|head usage − γ_h| + w·|block usage − γ_b| + w·(token usage − γ_p)²`,
    with `w = usage_loss_weight`. As in the official loss, the token usage
    is the mean keep rate of all tokens, class token included, over the
    batch and the patch-gated blocks; the block usage that of the attention
    and MLP sub-layers over the blocks with a block gate; the head usage
    that of the heads over the blocks with a head gate whose attention or
    MLP runs. As there, drop path (the backbone's `drop_path_rate`) applies
    in training to the blocks without block gate only.

    The backbone is a functional ViT of the library, such as one made by
    `build_vision_transformer`: its pre-norm `TransformerBlock`s run in
    sequence between a stem (images to tokens, the class token first) and a
    readout (tokens to the output). Its layers are shared, not copied.

    Args:
        backbone: functional `keras.Model` with pre-norm `TransformerBlock`s.
        target_usage: float γ in `(0, 1]`, or a `(patches, heads, blocks)`
            tuple of three.
        usage_loss_weight: float, the weight `w` of each usage term.
        temperature: float, the Gumbel-sigmoid temperature τ.
        patch_threshold: float, keep threshold of the patch gates.
        head_threshold: float, keep threshold of the head gates.
        block_threshold: float, keep threshold of the block gates.
        gate_bias: float, initial bias of every gate (0, as in the official
            code; positive values start fine-tuning with most decisions on).
            The gate kernels start from a truncated normal of deviation 0.02,
            also as there.
        seed: int, seed of the Gumbel noise.
        gate_first_block: bool. `True` (official, `ada_token_start_layer=0`)
            gates the patches of the first block too; `False` runs the first
            block in full, every decision then covering the blocks after it.
        head_gates_mlp_input: bool. `True` (official): an off head also
            zeroes its channels of the MLP's input; `dim` must then be
            divisible by the heads. `False`: an off head only outputs zero.
        gated_drop_path: bool. `False` (official): drop path skips the blocks
            with a block gate; `True` applies it to every block.
        tempered_inference: bool. `False` (official): inference keeps what
            `sigmoid(logit)` puts above the threshold. `True`: what
            `sigmoid(logit / temperature)` puts above it, the training
            decision without noise (see `GumbelSigmoidGate`). Only the patch
            gates, whose threshold is not 0.5 by default, decide otherwise.
        **kwargs: base model arguments, such as `name`.

    Call arguments:
        images: the backbone's input.
        training: bool; samples the gates and adds the usage loss.
        decisions: optional dict of fixed decisions (see `decide`), used
            instead of the gates, for example a random policy.

    Returns:
        The backbone's output, usually class probabilities.

    Example:

    >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=3)
    >>> model = AdaViT(vit, target_usage=0.5)
    >>> model(np.zeros((2, 28, 28))).shape
    (2, 10)

    References:
        - [Meng et al., 2022](https://arxiv.org/abs/2111.15668)
    """

    def __init__(
        self,
        backbone: keras.Model | dict,
        target_usage: float | Sequence[float] = 0.5,
        usage_loss_weight: float = 2.0,
        temperature: float = 5.0,
        patch_threshold: float = 0.6,
        head_threshold: float = 0.5,
        block_threshold: float = 0.5,
        gate_bias: float = 0.0,
        seed: int | None = None,
        gate_first_block: bool = True,
        head_gates_mlp_input: bool = True,
        gated_drop_path: bool = False,
        tempered_inference: bool = False,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if isinstance(backbone, dict):
            backbone = keras.saving.deserialize_keras_object(backbone)
        self.target_usage = _check_target_usage(target_usage)
        self.backbone = backbone
        self.blocks = _transformer_blocks(backbone)
        self.usage_loss_weight = check_float("usage_loss_weight", usage_loss_weight, low=0.0)
        self.temperature = temperature
        self.patch_threshold = _check_threshold("patch_threshold", patch_threshold)
        self.head_threshold = _check_threshold("head_threshold", head_threshold)
        self.block_threshold = _check_threshold("block_threshold", block_threshold)
        self.gate_bias = gate_bias
        self.seed = seed
        self.gate_first_block = check_bool("gate_first_block", gate_first_block)
        self.head_gates_mlp_input = check_bool("head_gates_mlp_input", head_gates_mlp_input)
        self.gated_drop_path = check_bool("gated_drop_path", gated_drop_path)
        self.tempered_inference = check_bool("tempered_inference", tempered_inference)
        self.stem = keras.Model(backbone.input, self.blocks[0].input, name="stem")
        self.readout = keras.Model(self.blocks[-1].output, backbone.output, name="readout")
        self.num_heads = self.blocks[0].num_heads
        if self.head_gates_mlp_input:
            _check_head_channels(self.stem.output.shape[-1], self.num_heads)
        # The first gated block; decision `i` belongs to block `first_gated + i`.
        self.first_gated = 0 if self.gate_first_block else 1
        self.gated_blocks = self.blocks[self.first_gated :]
        self.patch_gates, self.head_gates, self.block_gates = [], [], []
        # Made block by block: saved weights are matched in the order the gates are made.
        for index in range(self.first_gated, len(self.blocks)):
            self.patch_gates.append(
                self._gate(1, patch_threshold, f"patch_gate_{index}", 3 * index)
            )
            if index == 0:
                continue
            self.head_gates.append(
                self._gate(self.num_heads, head_threshold, f"head_gate_{index}", 3 * index + 1)
            )
            self.block_gates.append(
                self._gate(2, block_threshold, f"block_gate_{index}", 3 * index + 2)
            )

    def _gate(self, units, threshold, name, offset):
        return GumbelSigmoidGate(
            units,
            temperature=self.temperature,
            threshold=threshold,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            bias_initializer=keras.initializers.Constant(self.gate_bias),
            seed=None if self.seed is None else self.seed + offset,
            tempered_inference=self.tempered_inference,
            name=name,
        )

    def build(self, input_shape):
        tokens_shape = self.stem.output.shape  # (batch, tokens, dim)
        class_token_shape = (tokens_shape[0], tokens_shape[-1])  # (batch, dim)
        gates = [(gate, tokens_shape) for gate in self.patch_gates]
        gates += [(gate, class_token_shape) for gate in self.head_gates + self.block_gates]
        for gate, shape in gates:
            if not gate.built:  # loading a saved model builds them first
                gate.build(shape)
        self.built = True

    def call(
        self,
        images: Tensor,
        training: bool | None = None,
        decisions: Mapping[str, Tensor] | None = None,
    ) -> Tensor:
        outputs, used = self._forward(images, training, decisions)
        if training:
            self.add_loss(self._usage_loss(used))
        return outputs

    def _forward(self, images, training, decisions):
        """The masked path: the output and, per key, the gates of each gated block."""
        x = self.stem(images)  # (batch, tokens, dim)
        for block in self.blocks[: self.first_gated]:
            x = block(x, training=training)
        used = {key: [] for key in DECISION_KEYS}
        for index in range(len(self.gated_blocks)):
            gates = (
                self.gate_values(index, x, training)
                if decisions is None
                else fixed_gates(decisions, index, x.dtype)
            )
            x = self._gated_block(index, x, gates, training)
            for key in DECISION_KEYS:
                used[key].append(gates[key])
        return self.readout(x, training=training), used

    def gate_values(self, index: int, x: Tensor, training: bool | None = None) -> dict[str, Tensor]:
        """The decisions of gated block `index` from its input `x` `(batch, L, dim)`.

        The patch gate reads the patch tokens after the block's attention
        norm, as the official code's token gate does; the head and block
        gates read the raw class token. The first block has no head or
        block gate: its heads and sub-layers are on.

        Returns:
            dict with `"patches"` `(batch, L - 1)`, `"heads"` `(batch, heads)`,
            `"attention"` and `"mlp"` `(batch,)`, each 0 or 1.
        """
        block = self.first_gated + index
        normed = self.blocks[block].attention_norm(x[:, 1:])  # (batch, L - 1, dim)
        patches = self.patch_gates[index](normed, training=training)  # (batch, L - 1, 1)
        cls = x[:, 0]  # (batch, dim)
        if block == 0:
            heads, blocks = ops.ones_like(cls[:, :1]), ops.ones_like(cls[:, :2])
            heads = ops.repeat(heads, self.num_heads, axis=1)  # (batch, heads)
        else:
            heads = self.head_gates[block - 1](cls, training=training)  # (batch, heads)
            blocks = self.block_gates[block - 1](cls, training=training)  # (batch, 2)
        return {
            "patches": patches[..., 0],
            "heads": heads,
            "attention": blocks[:, 0],
            "mlp": blocks[:, 1],
        }

    def _gated_block(self, index, x, gates, training):
        """Gated block `index` with dropped patches as non-keys and gated residual branches."""
        block = self.first_gated + index
        patches = ops.cast(gates["patches"], x.dtype)
        tokens = ops.concatenate([ops.ones_like(patches[:, :1]), patches], axis=1)  # (batch, L)
        drop_path = self.gated_drop_path or block == 0  # the official first block has drop path
        layer = self.blocks[block]
        attended = layer.attention_branch(
            x,
            mask=tokens > 0.5,  # (batch, L), the tokens other tokens may attend to
            head_mask=gates["heads"],
            training=training,
            drop_path=drop_path,
        )  # (batch, L, dim)
        x = x + (tokens * ops.cast(gates["attention"], x.dtype)[:, None])[..., None] * attended
        channels = self.mlp_channel_mask(gates["heads"]) if self.head_gates_mlp_input else None
        mlp = layer.mlp_branch(x, channels, training=training, drop_path=drop_path)
        x = x + (tokens * ops.cast(gates["mlp"], x.dtype)[:, None])[..., None] * mlp
        # A new tensor without the key mask attached: it holds for this block only.
        return ops.add(x, ops.zeros((), x.dtype))

    def mlp_channel_mask(self, heads: Tensor) -> Tensor:
        """The MLP input channels of the heads `(batch, heads)` that are on, `(batch, dim)`.

        Channel `c` belongs to head `c // (dim / num_heads)`, as in the
        official `DynaLinear`.
        """
        width = self.stem.output.shape[-1] // self.num_heads
        return ops.repeat(ops.cast(heads, self.compute_dtype), width, axis=1)  # (batch, dim)

    def _usage_loss(self, used):
        usage = {key: ops.cast(ops.stack(used[key], axis=1), "float32") for key in DECISION_KEYS}
        patches = usage["patches"]  # (batch, gated_blocks, patches)
        tokens = ops.concatenate([ops.ones_like(patches[..., :1]), patches], axis=-1)
        token_usage = ops.mean(tokens)  # the class token is always kept
        # The head and block usage of the blocks with head and block gates.
        heads, attention, mlp = (usage[key][:, 1 - self.first_gated :] for key in DECISION_KEYS[1:])
        running = ops.maximum(attention, mlp)  # (batch, blocks)
        # Head usage counts the blocks that run, as in the official loss.
        head_usage = ops.sum(heads * running[..., None]) / (
            ops.sum(running) * self.num_heads + 1e-6
        )
        block_usage = (ops.mean(attention) + ops.mean(mlp)) / 2.0
        patch_target, head_target, block_target = self.target_usage
        return self.usage_loss_weight * (
            ops.abs(head_usage - head_target)
            + ops.abs(block_usage - block_target)
            + ops.square(token_usage - patch_target)
        )

    def decide(self, images: Tensor) -> dict[str, np.ndarray]:
        """The inference decisions of every gated block, as numpy arrays.

        Returns:
            dict with boolean `"patches"` `(batch, gated_blocks, patches)`,
            `"heads"` `(batch, gated_blocks, heads)`, `"attention"` and
            `"mlp"` `(batch, gated_blocks)`. Entry `i` is block
            `first_gated + i` of the backbone (`first_gated` is 0, or 1 with
            `gate_first_block=False`).
        """
        _, used = self._forward(images, training=False, decisions=None)
        return {
            key: np.stack([ops.convert_to_numpy(v) > 0.5 for v in values], axis=1)
            for key, values in used.items()
        }  # each (batch, gated_blocks, ...)

    def usage(self, decisions: Mapping[str, np.ndarray]) -> dict[str, float]:
        """The keep rate of each kind of decision, and the official token usage.

        One rate per key of `DECISION_KEYS`, over the blocks that have its
        gate: the rates `random_decisions` takes. The first block, which has
        no head or block gate, does not count for `"heads"`, `"attention"`
        and `"mlp"`; `"patches"` counts the patch tokens only.

        `"tokens"` is the statistic the official code reports and its usage
        loss pulls to the patch target: the keep rate of all tokens, the
        class token (always kept) included, over the patch-gated blocks. The
        official `"heads"` and block (the mean of `"attention"` and `"mlp"`)
        statistics are the ones here.

        Args:
            decisions: dict in the layout of `decide`.

        Returns:
            dict of floats: one per kind and `"tokens"`.

        Example:

        >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=3)
        >>> model = AdaViT(vit)
        >>> usage = model.usage(model.random_decisions(4, 0.5, seed=0))
        >>> usage["patches"], usage["tokens"]  # 8 of 16 patches; 9 of 17 tokens
        (0.5, 0.5294117647058824)
        """
        gated = {key: slice(None) for key in DECISION_KEYS}
        gated.update(dict.fromkeys(DECISION_KEYS[1:], slice(1 - self.first_gated, None)))
        rates = {
            key: float(np.mean(np.asarray(decisions[key])[:, gated[key]])) for key in DECISION_KEYS
        }
        patches = np.asarray(decisions["patches"]).shape[-1]
        rates["tokens"] = (1 + rates["patches"] * patches) / (1 + patches)
        return rates

    def usage_loss(self, decisions: Mapping[str, np.ndarray]) -> float:
        """The usage loss (the term that training adds) of fixed decisions.

        The loss of the call with `training=True`, computed on decisions
        such as the inference ones of `decide`: how far their usage is from
        the target, as the optimiser sees it.

        Args:
            decisions: dict in the layout of `decide`.

        Returns:
            float, 0 when every usage is at its target.

        Example:

        >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=3)
        >>> model = AdaViT(vit, target_usage=1.0)
        >>> model.usage_loss(model.random_decisions(4, 1.0, seed=0))
        0.0
        """
        used = {
            key: [np.asarray(decisions[key])[:, index] for index in range(len(self.gated_blocks))]
            for key in DECISION_KEYS
        }  # each a list of (batch, ...) per gated block
        return float(ops.convert_to_numpy(self._usage_loss(used)))

    def usage_at_target(self, usage: Mapping[str, float], tolerance: float = 0.05) -> bool:
        """Whether the official token, head and block usage are each within `tolerance` of target.

        The official statistics of `usage` (a dict from `usage`): `"tokens"`
        against the patch target, `"heads"` against the head target, and the
        block usage, the mean of `"attention"` and `"mlp"`, against the
        block target.

        Args:
            usage: dict as returned by `usage`.
            tolerance: float >= 0.

        Returns:
            bool.

        Example:

        >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=3)
        >>> model = AdaViT(vit, target_usage=0.5)
        >>> usage = {"tokens": 0.53, "heads": 0.5, "attention": 1.0, "mlp": 0.0}
        >>> model.usage_at_target(usage), model.usage_at_target(usage, tolerance=0.01)
        (True, False)
        """
        tolerance = check_float("tolerance", tolerance, low=0.0)
        blocks = (usage["attention"] + usage["mlp"]) / 2
        official = (usage["tokens"], usage["heads"], blocks)
        return all(
            abs(value - target) <= tolerance
            for value, target in zip(official, self.target_usage, strict=True)
        )

    def random_decisions(
        self, batch: int, usage: float | Mapping[str, float], seed: int | None = None
    ) -> dict[str, np.ndarray]:
        """Random decisions at imposed keep rates, in the layout of `decide`.

        Each example keeps, in each gated block, `floor(r·n)` or
        `floor(r·n) + 1` of the `n` patches (`r` the patch rate, the extra
        one with probability `r·n − floor(r·n)`), at random positions; heads
        likewise per block, and the attention and MLP sub-layers likewise
        over the gated blocks. So every example keeps (almost) the same
        share, and the mean keep rate of each kind is `r` in expectation:
        a random policy of a given usage, or a fixed keep rate to time.
        The first block, which has no head or block gate, keeps its heads
        and sub-layers.

        Args:
            batch: int, number of examples.
            usage: float in `[0, 1]` for every kind, or a dict with a rate
                for each of `"patches"`, `"heads"`, `"attention"`, `"mlp"`.
            seed: optional int, seed of the positions.

        Returns:
            dict of boolean arrays shaped as `decide` returns them.

        Example:

        >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=3)
        >>> patches = AdaViT(vit).random_decisions(4, 0.5, seed=0)["patches"]
        >>> patches.shape, int(patches[0, 0].sum())  # 8 of 16 patches in each block
        ((4, 3, 16), 8)
        """
        rates = usage if isinstance(usage, dict) else dict.fromkeys(DECISION_KEYS, usage)
        for key in DECISION_KEYS:
            if not 0 <= rates.get(key, -1) <= 1:
                raise ValueError(
                    "`usage` must be a rate in [0, 1] or a dict of one per kind "
                    f"{DECISION_KEYS}. Received: usage={usage!r}"
                )
        rng = np.random.default_rng(seed)
        shapes = self._decision_shapes(batch)
        decisions = {key: random_keep(shapes[key], rates[key], rng) for key in DECISION_KEYS}
        for key in DECISION_KEYS[1:]:
            decisions[key][:, : 1 - self.first_gated] = True  # the first block has no such gate
        return decisions

    def random_decisions_like(
        self, decisions: Mapping[str, np.ndarray], seed: int | None = None
    ) -> dict[str, np.ndarray]:
        """Random decisions with the keep rate of `decisions` in every block, per kind.

        Where `random_decisions` matches the mean usage of each kind over
        the blocks, this matches it block by block: in each gated block the
        random patches and heads are kept at that block's rate, in equal
        shares per example (as `random_decisions` does), and the attention
        and MLP sub-layers run for that block's share of the examples,
        picked at random. A learned policy that spends its tokens and heads
        in a few blocks computes more than random decisions of its mean
        usage; random decisions like it compute about as much, so the two
        compare at about equal MACs.

        Args:
            decisions: dict as returned by `decide` (or `random_decisions`).
            seed: optional int, seed of the positions and examples.

        Returns:
            dict of boolean arrays shaped as `decisions`.

        Example:

        >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=3)
        >>> model = AdaViT(vit)
        >>> learned = model.random_decisions(4, 0.5, seed=0)
        >>> learned["patches"][:, 1:] = False  # every patch after the first block dropped
        >>> like = model.random_decisions_like(learned, seed=1)
        >>> like["patches"].sum(axis=(0, 2))  # kept patches per block, as in `learned`
        array([32,  0,  0])
        """
        check_decision_kinds(decisions)
        batch = len(decisions["patches"])
        expected = self._decision_shapes(max(batch, 1))
        shapes = {key: np.shape(decisions[key]) for key in DECISION_KEYS}
        if shapes != expected:
            raise ValueError(
                f"`decisions` must be shaped as `decide` gives them: {expected}. "
                f"Received: decisions of shapes {shapes}"
            )
        rng = np.random.default_rng(seed)
        like = {}
        for key in DECISION_KEYS:
            used = np.asarray(decisions[key], bool)  # (batch, blocks[, units])
            blocks = []
            for block in range(used.shape[1]):
                rate = used[:, block].mean()
                # Patches and heads: a share of each example's; sub-layers: of the examples.
                blocks.append(random_keep(used[:, block].shape, rate, rng))
            like[key] = np.stack(blocks, axis=1)  # (batch, blocks[, units])
        return like

    def _decision_shapes(self, batch):
        """The shape of each kind of decision for `batch` images, as `decide` gives them."""
        gated = len(self.gated_blocks)
        patches = self.stem.output.shape[1] - 1
        return {
            "patches": (batch, gated, patches),
            "heads": (batch, gated, self.num_heads),
            "attention": (batch, gated),
            "mlp": (batch, gated),
        }

    def with_inference_rule(self, tempered: bool) -> "AdaViT":
        """A copy of this model, its weights copied, that decides by the given rule.

        The copy is an `AdaViT` of the same configuration except
        `tempered_inference=tempered`; this model is left as it is. To
        compare the official and the tempered inference of one trained
        model, or to keep the rule whose usage is at the target.

        Args:
            tempered: bool, the copy's `tempered_inference`.

        Returns:
            A new, uncompiled `AdaViT` with this model's weights.

        Example:

        >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=3)
        >>> model = AdaViT(vit, target_usage=0.5)
        >>> tempered = model.with_inference_rule(tempered=True)
        >>> tempered.tempered_inference, model.tempered_inference
        (True, False)
        """
        config = {**self.get_config(), "tempered_inference": check_bool("tempered", tempered)}
        copy = AdaViT.from_config(config)
        for model in (self, copy):  # the gates' weights exist once built
            if not model.built:
                model.build(self.backbone.input.shape)
        copy.set_weights(self.get_weights())
        return copy

    def fast_path(self, **kwargs: Any) -> AdaViTFastPath:
        """An `AdaViTFastPath` that skips the work the decisions leave out.

        Args:
            **kwargs: its arguments, such as `token_buckets`.
        """
        return AdaViTFastPath(self, **kwargs)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "backbone": keras.saving.serialize_keras_object(self.backbone),
                "target_usage": list(self.target_usage),
                "usage_loss_weight": self.usage_loss_weight,
                "temperature": self.temperature,
                "patch_threshold": self.patch_threshold,
                "head_threshold": self.head_threshold,
                "block_threshold": self.block_threshold,
                "gate_bias": self.gate_bias,
                "seed": self.seed,
                "gate_first_block": self.gate_first_block,
                "head_gates_mlp_input": self.head_gates_mlp_input,
                "gated_drop_path": self.gated_drop_path,
                "tempered_inference": self.tempered_inference,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        # Models saved before these options keep computing what they did.
        return cls(**{**FORMER_BEHAVIOUR, **config})


def _check_target_usage(target_usage):
    values = tuple(target_usage) if isinstance(target_usage, (list, tuple)) else (target_usage,) * 3
    if len(values) != 3 or not all(isinstance(v, (int, float)) and 0 < v <= 1 for v in values):
        raise ValueError(
            "`target_usage` must be a float in (0, 1] or three of them "
            f"(patches, heads, blocks). Received: target_usage={target_usage!r}"
        )
    return tuple(float(v) for v in values)


def _check_head_channels(dim, num_heads):
    if dim % num_heads:
        raise ValueError(
            "`head_gates_mlp_input=True` gives each head `dim / num_heads` MLP input channels: "
            f"the width must be divisible by the heads. Received: dim={dim} with "
            f"num_heads={num_heads}"
        )


def _transformer_blocks(backbone):
    if not isinstance(backbone, keras.Model):
        raise ValueError(f"`backbone` must be a keras.Model. Received: backbone={backbone!r}")
    blocks = [layer for layer in backbone.layers if isinstance(layer, TransformerBlock)]
    if len(blocks) < 2 or not all(block.normalize_first for block in blocks):
        raise ValueError(
            "`backbone` must hold at least two pre-norm `TransformerBlock`s. "
            f"Received: backbone={backbone.name!r} with {len(blocks)} blocks"
        )
    return blocks


def _check_threshold(name, value):
    """A gate's keep threshold: a probability strictly between 0 and 1."""
    return check_float(name, value, 0.0, 1.0, low_open=True, high_open=True)
