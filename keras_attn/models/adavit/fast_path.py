"""AdaViT inference that really skips work, in `keras.ops` (Meng et al., CVPR 2022).

AdaViT: Adaptive Vision Transformers for Efficient Image Recognition,
https://arxiv.org/abs/2111.15668. The official code only multiplies by the
decisions, so it is no faster than the full model. This path gathers the
kept tokens to a static capacity, slices the attention kernels to the kept
heads and skips the sub-layers that are off, inside one XLA-compilable
function, so that the saved work shows in the wall-clock time at any
batch size.
"""

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

import keras
import numpy as np
from keras import ops

from keras_attn._typing import Tensor
from keras_attn.kernels import runtime
from keras_attn.models.adavit.decisions import DECISION_KEYS, check_decision_kinds
from keras_attn.models.macs import count_macs, layer_macs
from keras_attn.utils.validation import check_int, check_optional_int

if TYPE_CHECKING:  # the model imports this module, not the other way round
    from keras_attn.models.adavit.model import AdaViT


@dataclasses.dataclass
class FastPathResult:
    """What `AdaViTFastPath.run` returns.

    Attributes:
        outputs: `(batch, classes)` numpy outputs of the model.
        decisions: the decisions used, as returned by `AdaViT.decide`.
        macs: `(batch,)` int64 multiply-accumulates of each example.
    """

    outputs: np.ndarray
    decisions: dict
    macs: np.ndarray


@keras.saving.register_keras_serializable(package="keras_attn")
class AdaViTFastPath(keras.Model):
    """Inference of an `AdaViT` that computes only what its decisions keep.

    Per gated block, each example's kept tokens, class token included, are
    moved to the front of its sequence, in their order (one gather). Then
    per sub-layer (attention, then MLP), the examples are sorted by their
    kept-token count (0 where the sub-layer is off) and split into groups of
    `group_size`; a group's examples are gathered from the batch and their
    result is scattered back. Each group runs one branch of a switch,
    chosen by its largest kept count: the sub-layer on the first tokens, up
    to the smallest bucket capacity that holds them, `(group, capacity,
    dim)`. For the attention the branch also depends on the heads that any
    of the group's examples keeps (their union): the query, key, value and
    output kernels are sliced to them, padded to the head-count bucket, and
    each example masks the heads it does not keep; the bucket of every head
    slices nothing and zeroes the off heads. A group whose sub-layer is off
    everywhere takes the empty branch. Dropped tokens pass unchanged, and a
    last gather puts the tokens back in their order. Every shape is static,
    so the call compiles with XLA (one conditional per group, only the
    chosen branch runs) and exports as a SavedModel. The outputs equal the
    masked path's (`AdaViT.__call__`) up to float rounding.

    On torch, which has no XLA, the call runs eagerly: each sub-layer runs
    once, on the examples that run it, at their largest kept count and the
    smallest head bucket that holds their union of heads (the shapes follow
    the data: no token buckets, groups or switch).

    The layers and weights are the model's own, not copies. The blocks run
    through `TransformerBlock.attention_branch` and `mlp_branch`, the
    attention through the core's `attend_heads`, so every option of the
    core (`qk_scale`, log-length scale, additive mask, causal pattern) is
    honoured; a sparse pattern or another attention raises a `ValueError`
    when the path is first called. Float32 compute.

    Args:
        model: a built `AdaViT`.
        token_buckets: int, number of token capacities, spread evenly up to
            all tokens.
        head_buckets: int, number of head capacities, spread evenly up to
            all heads; defaults to one per head count up to 4. The branches
            of the largest capacity compute every head and zero the off
            ones, without slicing the kernels, so `head_buckets=1` never
            slices: on CPU at 70% of the heads kept, as fast or faster in
            most cases (slicing copies the kept heads' kernels), and fewer
            branches to compile.
        group_size: int, examples per group.
        **kwargs: base model arguments, such as `name`.

    Call arguments:
        images: the backbone's input.
        decisions: optional fixed decisions (see `AdaViT.decide`); by
            default the gates decide, as in the masked path.
        return_decisions: bool, also return the decisions used.
        training: ignored; the fast path is for inference only.

    Returns:
        The outputs, or `(outputs, decisions)` with `return_decisions`.

    Example:

    >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=32, num_layers=3)
    >>> model = AdaViT(vit)
    >>> _ = model(np.zeros((1, 28, 28), "float32"))  # builds the gates
    >>> fast = model.fast_path(token_buckets=2, head_buckets=2)  # few shapes: quick to compile
    >>> result = fast.run(np.zeros((2, 28, 28), "float32"))
    >>> result.outputs.shape, result.macs.shape
    ((2, 10), (2,))

    References:
        - [Meng et al., 2022](https://arxiv.org/abs/2111.15668)
    """

    def __init__(
        self,
        model: "AdaViT",
        token_buckets: int = 4,
        head_buckets: int | None = None,
        group_size: int = 8,
        **kwargs: Any,
    ):
        super().__init__(**kwargs)
        if not getattr(model, "built", False):
            raise ValueError("`model` must be built. Received: model with built=False")
        token_buckets = check_int("token_buckets", token_buckets)
        group_size = check_int("group_size", group_size)
        head_buckets = check_optional_int("head_buckets", head_buckets)
        self.model = model
        self.group_size = group_size
        self.tokens = model.stem.output.shape[1]
        heads = model.num_heads
        self.token_capacities = _capacities(self.tokens, token_buckets)
        self.head_capacities = _capacities(heads, head_buckets or min(heads, 4))
        self._block_macs = [_block_macs_by_tokens(b, self.tokens) for b in model.gated_blocks]
        self._compiled = {}
        self.built = True  # every layer is the built model's

    def call(
        self,
        images: Tensor,
        decisions: Mapping[str, Tensor] | None = None,
        return_decisions: bool = False,
        training: bool | None = None,
    ) -> Tensor | tuple[Tensor, dict[str, Tensor]]:
        batch = ops.shape(images)[0]
        size = self.group_size if not isinstance(batch, int) else min(self.group_size, batch)
        groups = (batch + size - 1) // size
        padded = _pad_batch(images, groups * size)  # (groups * size, ...)
        real = ops.arange(0, groups * size) < batch  # (padded,), the real examples
        model = self.model
        x = model.stem(padded)  # (padded, L, dim)
        for block in model.blocks[: model.first_gated]:
            x = block(x)
        used = {key: [] for key in DECISION_KEYS}
        for index, block in enumerate(model.gated_blocks):
            if decisions is None:
                gates = model.gate_values(index, x, training=False)
            else:
                gates = {
                    key: _pad_batch(ops.cast(decisions[key][:, index], x.dtype), groups * size)
                    for key in used
                }
            if padded is not images:  # the padding examples decide nothing
                gates = {key: _off_outside(value, real) for key, value in gates.items()}
            if keras.backend.backend() == "torch":
                x = self._eager_block(block, x, gates)
            else:
                x = self._block(block, x, gates, groups, size)
            for key in DECISION_KEYS:
                used[key].append(gates[key][:batch])
        outputs = model.readout(x)[:batch]
        if not return_decisions:
            return outputs
        return outputs, {key: ops.stack(values, axis=1) > 0.5 for key, values in used.items()}

    def _block(self, block, x, gates, groups, size):
        patches = ops.cast(gates["patches"], x.dtype)
        tokens = ops.concatenate([ops.ones_like(patches[:, :1]), patches], axis=1)  # (b, L)
        heads = ops.cast(gates["heads"], x.dtype)  # (b, heads)
        order, inverse = _kept_first(tokens)  # (b, L) each
        x = _take_rows(x, order)  # (b, L, dim), the kept tokens first
        kept = ops.sum(tokens, axis=1)  # (b,)
        validity = ops.arange(0, x.shape[1], dtype=x.dtype)[None] < kept[:, None]  # (b, L)
        validity = ops.cast(validity, x.dtype)
        for key, branches, pick in (
            ("attention", self._attention_branches(block), self._attention_index),
            ("mlp", self._mlp_branches(block), self._mlp_index),
        ):
            on = ops.cast(gates[key], x.dtype)  # (b,)
            operands = (validity, heads, on)
            x = _grouped(branches, x, operands, kept * on, groups, size, pick)
        return _take_rows(x, inverse)  # (b, L, dim), the tokens back in their order

    def _eager_block(self, block, x, gates):
        """`_block` run eagerly (torch), the shapes following the decisions.

        Each sub-layer runs once, on the examples that run it, at their
        largest kept count: their kept tokens, in order, are gathered from
        the batch (filled up with dropped tokens, which the mask hides and
        which keep their value), and written back after the residual
        addition; when the same examples run both sub-layers, they are
        gathered and written back once for both. The attention runs on the
        heads that any of them keeps, padded to the smallest head bucket
        that holds them. A mask that would keep everything (the tokens of a
        batch of one, the heads when every head is kept) is left out, so
        the sub-layer runs as in the full model.
        """
        decided = {key: ops.convert_to_numpy(value) > 0.5 for key, value in gates.items()}
        batch = len(decided["patches"])
        tokens = np.concatenate([np.ones((batch, 1), bool), decided["patches"]], axis=1)  # (b, L)
        rows = {key: np.flatnonzero(decided[key]) for key in ("attention", "mlp")}
        if np.array_equal(rows["attention"], rows["mlp"]):
            runs = [(rows["attention"], ("attention", "mlp"))]
        else:
            runs = [(rows[key], (key,)) for key in ("attention", "mlp")]
        for on, keys in runs:  # `on`: the examples that run the sub-layers `keys`
            if on.size:
                heads = gates["heads"] if on.size == batch else ops.take(gates["heads"], on, 0)
                x = self._eager_sub_layers(keys, block, x, on, tokens[on], heads)
        return x

    def _eager_sub_layers(self, keys, block, x, rows, tokens, heads):
        """Sub-layers `keys`, in order, on the kept `tokens` `(r, L)` of the examples `rows`."""
        _, length, dim = x.shape
        capacity = int(tokens.sum(axis=1).max())
        slots = np.argsort(~tokens, axis=1, kind="stable")[:, :capacity]  # (r, c), kept first
        valid = np.take_along_axis(tokens, slots, axis=1)  # (r, c)
        positions = ops.convert_to_tensor((rows[:, None] * length + slots).reshape(-1), "int32")
        flat = ops.reshape(x, (-1, dim))  # (b * L, dim)
        taken = ops.reshape(ops.take(flat, positions, axis=0), (len(rows), capacity, dim))
        mask = None if valid.all() else ops.convert_to_tensor(valid)  # (r, c)
        head_on = ops.convert_to_numpy(heads) > 0.5  # (r, heads)
        for key in keys:
            if key == "attention":
                update = block.attention_branch(
                    taken, mask=mask, drop_path=False, **self._eager_heads(heads, head_on)
                )  # (r, c, dim)
            else:
                every_head = head_on.all() or not self.model.head_gates_mlp_input
                channels = None if every_head else self.model.mlp_channel_mask(heads)  # (r, dim)
                update = block.mlp_branch(taken, channels, drop_path=False)  # (r, c, dim)
            if mask is not None:  # the fillers keep their value
                update = ops.cast(mask, update.dtype)[..., None] * update  # (r, c, dim)
            taken = taken + update  # (r, c, dim)
        updated = ops.reshape(taken, (-1, dim))  # (r * c, dim)
        return ops.reshape(ops.scatter_update(flat, positions[:, None], updated), x.shape)

    def _eager_heads(self, heads, head_on):
        """The `heads` and `head_mask` of `attention_branch` for the heads `(r, heads)` kept."""
        union = np.flatnonzero(head_on.any(axis=0))  # the heads any example keeps
        bucket = _smallest_holding(self.head_capacities, union.size)
        if bucket == self.model.num_heads:
            return {"head_mask": None if head_on.all() else heads}
        off = np.setdiff1d(np.arange(self.model.num_heads), union)[: bucket - union.size]
        kept = np.concatenate([union, off])  # (bucket,), padded with heads no example keeps
        if head_on[:, kept].all():
            return {"heads": ops.convert_to_tensor(kept, "int32"), "head_mask": None}
        taken = ops.take(heads, ops.convert_to_tensor(kept, "int32"), axis=1)  # (r, bucket)
        return {"heads": ops.convert_to_tensor(kept, "int32"), "head_mask": taken}

    def _token_index(self, keys):
        """0 when every key `(g,)` is 0 (the sub-layer is off), else 1 + the token bucket."""
        largest = ops.max(keys)  # the group's largest kept count
        bucket = ops.sum(ops.cast(ops.less(np.array(self.token_capacities), largest), "int32"))
        return ops.where(largest > 0, 1 + bucket, 0)

    def _mlp_index(self, keys, validity, heads, on):
        """The MLP branch of a group: 0 when off, else 1 + the token bucket."""
        return self._token_index(keys)

    def _attention_index(self, keys, validity, heads, on):
        """The attention branch: 0 when off, else by token bucket and the group's union of heads."""
        union = ops.sum(_union_of_heads(heads, on))  # how many heads any example keeps
        head_bucket = ops.less(np.array(self.head_capacities), ops.maximum(union, 1.0))
        head_bucket = ops.sum(ops.cast(head_bucket, "int32"))
        token_index = self._token_index(keys)  # 0 or 1 + token bucket
        combined = 1 + (token_index - 1) * len(self.head_capacities) + head_bucket
        return ops.where(token_index > 0, combined, 0)

    def _attention_branches(self, block):
        every = self.model.num_heads
        branches = [_unchanged]
        for capacity in self.token_capacities:
            for heads in self.head_capacities:
                branches.append(
                    _attention_branch(block, capacity, None if heads == every else heads)
                )
        return branches

    def _mlp_branches(self, block):
        mask = self.model.mlp_channel_mask if self.model.head_gates_mlp_input else None
        return [_unchanged] + [_mlp_branch(block, c, mask) for c in self.token_capacities]

    def run(
        self,
        images: np.ndarray,
        decisions: Mapping[str, np.ndarray] | None = None,
        batch_size: int | None = None,
    ) -> FastPathResult:
        """Runs the compiled fast path on numpy inputs (eager on torch).

        Args:
            images: numpy batch of the backbone's input.
            decisions: optional fixed decisions (see `AdaViT.decide`).
            batch_size: optional int. Runs the images in batches of this
                size, the last one padded with zeros, so that one compiled
                function serves any number of images; by default all images
                form one batch (one compilation per batch size).

        Returns:
            A `FastPathResult`.
        """
        batch_size = len(images) if batch_size is None else batch_size
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(
                f"`batch_size` must be a positive int. Received: batch_size={batch_size!r}"
            )
        compiled = self.compiled_function(fixed_decisions=decisions is not None)
        batches = _padded_batches(images, decisions, batch_size)
        parts = [compiled(*arguments) for arguments in batches]
        outputs = np.concatenate([part[0] for part in parts])[: len(images)]
        used = {
            k: np.concatenate([part[1][k] for part in parts])[: len(images)].astype(bool)
            for k in DECISION_KEYS
        }
        return FastPathResult(outputs, used, self.macs(used))

    def compiled_function(
        self, fixed_decisions: bool = False
    ) -> Callable[..., tuple[np.ndarray, dict[str, np.ndarray]]]:
        """The XLA-compiled call that `run` uses, made once and cached.

        Args:
            fixed_decisions: bool; `True` gives the function of
                `(images, decisions)`, decisions as float32 arrays in the
                layout of `AdaViT.decide`; `False` lets the gates decide.

        Returns:
            A function of numpy inputs returning `(outputs, decisions)` as
            numpy arrays (see `xla_function`); one compilation per batch
            size.

        On torch, which has no XLA, the function runs the path eagerly,
        without gradients: each sub-layer on the examples that run it, at
        their largest kept count (see `call`).
        """
        if fixed_decisions not in self._compiled:
            self._compiled[fixed_decisions] = inference_function(
                self, return_decisions=True, with_decisions=fixed_decisions
            )
        return self._compiled[fixed_decisions]

    def predictor(
        self, decisions: Mapping[str, np.ndarray] | None = None
    ) -> Callable[[np.ndarray], tuple[np.ndarray, dict[str, np.ndarray]]]:
        """The compiled call on one batch of images, with `decisions` bound.

        For timing or serving a fixed policy: every call imposes the same
        decisions, one row per image, so the batch must have as many images
        as `decisions` has rows.

        Args:
            decisions: optional fixed decisions in the layout of
                `AdaViT.decide`; `None` lets the gates decide (any batch
                size).

        Returns:
            A function `fn(images)` returning `(outputs, decisions)` as numpy
            arrays (see `compiled_function`).
        """
        if decisions is None:
            return self.compiled_function()
        check_decision_kinds(decisions)
        compiled = self.compiled_function(fixed_decisions=True)
        fixed = {key: np.asarray(decisions[key], "float32") for key in DECISION_KEYS}
        rows = len(fixed["patches"])

        def predict(images):
            if len(images) != rows:
                raise ValueError(
                    f"The bound decisions have {rows} rows; `images` must have as many. "
                    f"Received: images with {len(images)} rows"
                )
            return compiled(images, fixed)

        return predict

    def macs(self, decisions: Mapping[str, np.ndarray]) -> np.ndarray:
        """Multiply-accumulates of each example under `decisions`.

        Counted with `keras_attn.models.macs`: the backbone outside the gated
        blocks, the gates, and per gated block the attention on the kept
        tokens and heads (when on) and the MLP on the kept tokens (when on).

        Args:
            decisions: dict as returned by `AdaViT.decide`.

        Returns:
            `(batch,)` int64.
        """
        kept, heads = _kept_counts(decisions)
        return self._count_macs(kept, heads, decisions)

    def computed_macs(self, decisions: Mapping[str, np.ndarray]) -> np.ndarray:
        """Multiply-accumulates the fast path computes for each example in a batch of one.

        As `macs`, but on the tokens and heads that the example's branch
        computes: its kept tokens padded to the capacity of their token
        bucket, and the capacity of its kept heads' head bucket (every head
        with `head_buckets=1`). In a larger batch a group computes at the
        capacities of the union of its examples, at least these.

        Args:
            decisions: dict as returned by `AdaViT.decide`.

        Returns:
            `(batch,)` int64.
        """
        kept, heads = _kept_counts(decisions)
        tokens = _smallest_holding(self.token_capacities, kept)
        heads = _smallest_holding(self.head_capacities, heads)
        return self._count_macs(tokens, heads, decisions)

    def _count_macs(self, tokens, heads, decisions):
        """MACs of each example on `tokens` and `heads` `(batch, gated_blocks)` where on."""
        total = np.full(tokens.shape[0], self.fixed_macs(), "int64")
        for index, (attention, mlp) in enumerate(self._block_macs):  # (L + 1,) each
            n = tokens[:, index]
            per_head = attention[n] // self.model.num_heads
            total += per_head * heads[:, index] * decisions["attention"][:, index]
            total += mlp[n] * decisions["mlp"][:, index]
        return total

    def fixed_macs(self) -> int:
        """MACs that every example spends: stem, ungated first block, readout and gates."""
        model = self.model
        dim = model.stem.output.shape[-1]
        gates = len(model.patch_gates) * (self.tokens - 1) * dim
        gates += len(model.head_gates) * dim * (model.num_heads + 2)
        gated = sum(layer_macs(block, (1, self.tokens, dim)) for block in model.gated_blocks)
        return count_macs(model.backbone) - gated + gates

    def full_macs(self) -> int:
        """Multiply-accumulates of one example through the backbone alone."""
        return count_macs(self.model.backbone)

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "model": keras.saving.serialize_keras_object(self.model),
                "token_buckets": len(self.token_capacities),
                "head_buckets": len(self.head_capacities),
                "group_size": self.group_size,
            }
        )
        return config

    @classmethod
    def from_config(cls, config):
        config["model"] = keras.saving.deserialize_keras_object(config["model"])
        return cls(**config)


def inference_function(model, **call_kwargs):
    """`model`'s inference as a function of numpy inputs, as fast as the backend runs it.

    `xla_function` on TensorFlow and JAX; on torch, which has no XLA, the
    same function run eagerly and without gradients. The arguments are
    those of `xla_function`.
    """
    if keras.backend.backend() == "torch":
        return _eager_function(model, **call_kwargs)
    return xla_function(model, **call_kwargs)


def _eager_function(model, **call_kwargs):
    """`model`'s inference as an eager function of numpy inputs, without gradients.

    The counterpart of `xla_function` for torch: the same arguments, and
    numpy arrays back.
    """
    with_decisions = call_kwargs.pop("with_decisions", False)

    @runtime.without_gradients
    def run(images, *decisions):
        kwargs = dict(call_kwargs, training=False)
        if with_decisions:
            kwargs["decisions"] = decisions[0]
        return keras.tree.map_structure(ops.convert_to_numpy, model(images, **kwargs))

    return run


def xla_function(model, **call_kwargs):
    """`model`'s inference as one XLA-compiled function of numpy inputs.

    TensorFlow: a `tf.function` with `jit_compile=True`; JAX: `jax.jit` of
    `model.stateless_call`. `with_decisions=True` makes the second argument
    the dict of decisions. Returns numpy arrays (nested like the outputs).

    Args:
        model: a built Keras model.
        **call_kwargs: further arguments of the call, such as
            `return_decisions=True`.

    Returns:
        A function `fn(images[, decisions])`.
    """
    with_decisions = call_kwargs.pop("with_decisions", False)
    backend = keras.backend.backend()
    if backend == "tensorflow":

        def forward(images, *decisions):  # `decisions`: empty, or the dict
            kwargs = dict(call_kwargs, training=False)
            if with_decisions:
                kwargs["decisions"] = decisions[0]
            return model(images, **kwargs)

        compiled = runtime.xla_compiled(forward)

        def run(*args):
            return keras.tree.map_structure(np.asarray, compiled(*args))

        run.compiled = compiled
        return run
    if backend == "jax":
        trainable = [v.value for v in model.trainable_variables]
        frozen = [v.value for v in model.non_trainable_variables]

        def stateless(trainable, frozen, images, *decisions):
            kwargs = dict(call_kwargs, training=False)
            if with_decisions:
                kwargs["decisions"] = decisions[0]
            return model.stateless_call(trainable, frozen, images, **kwargs)[0]

        compiled = runtime.xla_compiled(stateless)
        return lambda *args: keras.tree.map_structure(
            np.asarray, compiled(trainable, frozen, *args)
        )
    raise ValueError(
        f"XLA inference needs the tensorflow or jax backend. Received: backend={backend!r}"
    )


def _grouped(branches, x, operands, keys, groups, size, pick):
    """Runs `branches[pick(...)]` on each group of `size` examples sorted by `keys`.

    A group's examples are gathered from `x` and their result is scattered
    back, so that `x` is never copied whole.
    """
    x, operands, keys = _stop_constant_analysis((x, operands, keys))
    if isinstance(groups, int) and groups == 1:  # a static batch of one group: no sort, no loop
        return ops.switch(pick(keys, *operands), branches, x, *operands)  # (b, L, dim)
    order = ops.argsort(-keys)  # (b,), largest key first

    def body(group, x):
        start = ops.reshape(ops.cast(group, "int32") * size, (1,))
        members = ops.slice(order, start, (size,))  # (size,)
        chunk = ops.take(x, members, axis=0)  # (size, L, dim)
        chunk_operands = tuple(ops.take(o, members, axis=0) for o in operands)
        index = pick(ops.take(keys, members), *chunk_operands)
        updated = ops.switch(index, branches, chunk, *chunk_operands)  # (size, L, dim)
        return ops.scatter_update(x, members[:, None], updated)  # (b, L, dim)

    return ops.fori_loop(0, groups, body, x)


def _stop_constant_analysis(values):
    """`values` unchanged, passed through a loop of one step.

    TensorFlow's XLA bridge tries to resolve the operands of every
    conditional as compile-time constants by interpreting the graph above
    them, with tensors of their real size, up to the nearest loop. Without
    this loop it interprets the whole model above every switch: at DeiT-S
    size two gated blocks took 63 s to compile, 1.5 s with it. XLA removes
    the loop; the other backends run its one step.
    """
    return ops.fori_loop(0, 1, lambda _, unchanged: unchanged, values)


def _kept_first(tokens):
    """The order that puts the kept tokens `(g, L)` first, each part in its order, and its inverse.

    Kept tokens keep their order, so a causal pattern sees the same past.
    """
    length = tokens.shape[1]
    rank = tokens * length - ops.arange(0, length, dtype=tokens.dtype)  # (g, L), all distinct
    order = ops.argsort(-rank, axis=-1)  # (g, L)
    return order, ops.argsort(order, axis=-1)  # (g, L) each


def _take_rows(x, rows):
    """`x` `(g, L, dim)` with the tokens of each example taken at `rows` `(g, L)`.

    `ops.take_along_axis(x, rows[..., None], axis=1)`, as one lookup of whole
    rows of the flattened tokens, which TensorFlow's XLA runs several times
    faster at a batch of 64.
    """
    groups, length, dim = ops.shape(x)
    offsets = ops.arange(0, groups, dtype="int32")[:, None] * length  # (g, 1)
    flat_rows = ops.reshape(ops.cast(rows, "int32") + offsets, (-1,))  # (g * L,)
    taken = ops.take(ops.reshape(x, (-1, dim)), flat_rows, axis=0)  # (g * L, dim)
    return ops.reshape(taken, (groups, length, dim))


def _union_of_heads(heads, on):
    """`(heads,)`: 1 for the heads that any example `(g, heads)` with its sub-layer `on` keeps."""
    return ops.max(heads * on[:, None], axis=0)


def _unchanged(x, *operands):
    return x


def _attention_branch(block, capacity, head_capacity):
    """Attention on the first `capacity` tokens and `head_capacity` heads; `None`: every head.

    With a head capacity the kernels are sliced to the heads that the
    group's examples keep (their union, padded with off heads), and each
    example masks the heads it does not keep; without one every head is
    computed and the off ones are zeroed.
    """

    def branch(x, validity, heads, on):
        tokens, validity = x[:, :capacity], validity[:, :capacity]  # (g, c, dim), (g, c)
        subset = {"head_mask": heads}
        if head_capacity is not None:
            kept = ops.argsort(-_union_of_heads(heads, on))[:head_capacity]  # (h,), the union first
            subset = {"heads": kept, "head_mask": ops.take(heads, kept, axis=1)}  # (g, h)
        update = block.attention_branch(tokens, mask=validity > 0.5, drop_path=False, **subset)
        return _updated_tokens(x, tokens + (validity * on[:, None])[..., None] * update)

    return branch


def _mlp_branch(block, capacity, channel_mask):
    """The MLP on the first `capacity` tokens; `channel_mask` zeroes off heads' input channels."""

    def branch(x, validity, heads, on):
        tokens, validity = x[:, :capacity], validity[:, :capacity]  # (g, c, dim), (g, c)
        channels = None if channel_mask is None else channel_mask(heads)  # (g, dim)
        update = block.mlp_branch(tokens, channels, drop_path=False)  # (g, c, dim)
        return _updated_tokens(x, tokens + (validity * on[:, None])[..., None] * update)

    return branch


def _updated_tokens(x, first):
    """`x` `(g, L, dim)` with its first tokens replaced by `first` `(g, c, dim)`."""
    return ops.slice_update(x, (0, 0, 0), first)


def _pad_batch(x, size):
    """`x` padded with zeros along the batch axis to `size` rows."""
    if x.shape[0] == size:  # a static batch that needs no padding
        return x
    filler = ops.zeros((size, *x.shape[1:]), x.dtype)
    return ops.concatenate([x, filler], axis=0)[:size]


def _off_outside(gate, real):
    """Decisions forced off for the padding examples."""
    real = ops.cast(real, gate.dtype)
    return gate * ops.reshape(real, (-1,) + (1,) * (len(gate.shape) - 1))


def _smallest_holding(capacities, counts):
    """The smallest of the ascending `capacities` that holds each count (at least 1)."""
    capacities = np.asarray(capacities)
    return capacities[np.searchsorted(capacities, np.maximum(counts, 1))]


def _kept_counts(decisions):
    """Kept tokens (class token included) and kept heads, each `(batch, gated_blocks)`."""
    kept = 1 + np.sum(decisions["patches"], axis=-1)  # (batch, gated_blocks)
    return kept, np.sum(decisions["heads"], axis=-1)  # (batch, gated_blocks)


def _capacities(total, buckets):
    return sorted(
        {max(1, math.ceil(total * k / min(buckets, total))) for k in range(1, buckets + 1)}
    )


def _block_macs_by_tokens(block, tokens):
    """Attention and MLP MACs of `block` on 0..`tokens` tokens, two `(tokens + 1,)` arrays."""
    dim = block.attention_norm.gamma.shape[0]
    attention = [layer_macs(block.attention, (1, n, dim)) for n in range(tokens + 1)]
    whole = [layer_macs(block, (1, n, dim)) for n in range(tokens + 1)]
    attention = np.array(attention, "int64")
    return attention, np.array(whole, "int64") - attention


def _padded_batches(images, decisions, batch_size):
    """The call arguments of each batch: `(images,)` or `(images, decisions)`, zero-padded."""
    for start in range(0, len(images), batch_size):
        window = slice(start, start + batch_size)
        padded = (_pad_rows(images[window], batch_size),)
        if decisions is not None:
            chunk = {
                k: _pad_rows(np.asarray(v[window], "float32"), batch_size)
                for k, v in decisions.items()
            }
            padded += (chunk,)
        yield padded


def _pad_rows(x, size):
    """`x` with zero rows appended up to `size` rows."""
    return np.concatenate([x, np.zeros((size - len(x), *x.shape[1:]), x.dtype)])
