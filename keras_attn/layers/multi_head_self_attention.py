"""Multi-head self-attention: the shared attention core of keras_attn.

Every attention layer and model in the library is built on this layer. It
keeps the kernel layout of `keras.layers.MultiHeadAttention` (query, key and
value kernels `(dim, num_heads, head_dim)`, output kernel
`(num_heads, head_dim, dim)`), so initializers and pruning tools work on both,
and adds the hooks the papers need: a per-head mask input (Michel et al.,
2019), sparse attention patterns (Li et al., 2019) and log-length logit
scaling (Chiang & Cholak, 2022).
"""

import functools
import math
from typing import Any

import keras
from keras import ops

from keras_attn._typing import Initializer, Shape, Tensor
from keras_attn.layers._config import argument_config
from keras_attn.layers.attention_pattern import AttentionPattern
from keras_attn.utils.initializers import clone_initializer
from keras_attn.utils.validation import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_last_positions,
    check_optional_int,
    check_positive,
    check_rate,
    check_shape,
    shape_checked_when_run,
    static_size,
)

LOGIT_SCALES = ("none", "log_length")
DENSE_PATTERNS = ("dense", "causal")
# Finite stand-in for -inf: a fully masked row must give zeros, not NaN.
MASKED_LOGIT = -1e9
# Length from which the dense patterns run block by block on XLA CPU, the
# block of queries (at most half the length, so that a causal step skips the
# masked blocks), and the most blocks (each block is unrolled in the
# compiled step, so longer sequences get longer blocks rather than more of
# them). See `MultiHeadSelfAttention.blockwise_min_length`.
BLOCKWISE_MIN_LENGTH = 1024
BLOCKWISE_BLOCK_SIZE = 1024
BLOCKWISE_MAX_BLOCKS = 16
# Keys per step of a query block's loop: its logits, (1024, 128) per head,
# stay in cache (benchmarks/attention_speed.py; 2 MB for 4 heads: blocks of
# 512 or 256 keys were slower).
BLOCKWISE_KEY_BLOCK_SIZE = 128
# From this length, torch computes a pattern of fixed offsets from shifted
# views rather than gathered keys. See `MultiHeadSelfAttention.shifted_sparse_keys`.
TORCH_SHIFTED_MIN_LENGTH = 1024
# From this length, torch's shifted loop reads the attention weights slot by
# slot from a contiguous copy (`_Slots.columns`): 1.2x faster steps at 8,192,
# 0.9-1.0x up to 4,096, where the copy costs what the strided reads save.
TORCH_SLOT_MAJOR_MIN_LENGTH = 8192


@keras.saving.register_keras_serializable(package="keras_attn")
class MultiHeadSelfAttention(keras.layers.Layer):
    """Multi-head self-attention with head masks, patterns and logit scaling.

    Computes `softmax(s * c * Q K^T) V` per head, where `c` is `qk_scale`
    (by default `1 / sqrt(key_dim)`) and `s` is 1 or, with
    `logit_scale="log_length"`, the natural log of the number of unmasked
    positions of each example. Which keys a query may see is set by
    `attention_pattern`; Keras masks (padding) remove keys as well. By
    default a query with no visible key outputs zeros (it never attends to
    masked or future positions); `additive_mask` instead reproduces code
    that adds a large negative number to masked logits. A masked (padded)
    position influences no output, even if it holds NaN or inf, and neither
    does a position a query may not see (its future under a causal
    pattern). The query-key logits and the softmax run in float32 under
    `mixed_float16`; the softmax runs in float32 under every policy.

    Args:
        num_heads: int, number of attention heads.
        key_dim: int, size of each head for query and key.
        value_dim: int, size of each head for value. Defaults to `key_dim`.
        output_dim: int, last dimension of the output. Defaults to the last
            dimension of the input.
        dropout: float in `[0, 1)`, dropout rate on the attention weights.
        use_bias: bool, whether the projections use bias vectors.
        output_use_bias: bool or `None`, whether the output projection uses
            a bias vector. `None` (default) follows `use_bias`; `False`
            with `use_bias=True`, or `True` with `use_bias=False` (query,
            key and value without bias, as in T2T-ViT), sets it apart.
        attention_pattern: `"dense"` (every key), `"causal"` (keys up to the
            query position) or an `AttentionPattern` instance: no
            `(length, length)` tensor is built. A pattern of fixed backward
            offsets (`static_offsets`, such as LogSparse and causal windows)
            is computed, on JAX and TensorFlow, from shifted views of the
            keys and values, one logit per offset, with no per-slot copy of
            them in the forward or the backward pass (on torch from 1,024
            positions); other patterns, and shorter sequences on torch,
            have their keys gathered (`O(L K)` keys and values: a few large
            kernels instead of a loop). Without
            attention scores and active dropout (and with
            `value_dim == key_dim`), the dense patterns run through
            `keras.ops.dot_product_attention`, which reaches fused (flash,
            cuDNN) kernels on GPU; under float16 that step runs in float32.
        logit_scale: `"none"` or `"log_length"`.
        additive_mask: `None` (default) or a negative float, how masked keys
            are removed. `None` removes them exactly, and a query with no
            visible key (a padded query of a left-padded causal sequence)
            outputs zeros. A float `b`, for example `-10000.0` as in BERT and
            the official BSARec/SASRec code, is added (in float32) to the
            logit of every masked key instead: a query that sees a key gets
            the same weights up to `exp(b)`, and a query with no visible key
            attends over all keys, masked and future ones included, with
            weights `softmax(logits + b)`. Dense patterns only. It disables
            the fused `dot_product_attention` path.
        qk_scale: `None` (default) or a positive float, the factor of the
            query-key dot products. `None` gives `1 / sqrt(key_dim)`; a
            float reproduces code with another scale, such as the
            pretrained T2T-ViT-7 (`256 ** -0.5`, one over the square root
            of the model width, with `key_dim=64`). It applies on every
            path, fused, dense and sparse.
        kernel_initializer: initializer of the four projection kernels.
        bias_initializer: initializer of the bias vectors.
        kernel_regularizer: regularizer of the projection kernels.
        bias_regularizer: regularizer of the bias vectors.
        seed: int, seed of the attention dropout.
        **kwargs: base layer arguments, such as `name` and `dtype`.

    Call arguments:
        inputs: tensor of shape `(batch, length, dim)`.
        mask: optional boolean `(batch, length)` padding mask; `False` keys are
            ignored, whatever they hold. Passed automatically by Keras
            masking.
        head_mask: optional `(num_heads,)` or `(batch, num_heads)` tensor that
            multiplies each head's output before the output projection.
        attention_mask: optional boolean `(batch, length, length)` mask, or
            `(batch, 1, length)` for the same keys at every query; `False`
            entries are not attended to. With a sparse pattern, a query
            attends to the keys of its slots that the mask allows (the mask
            is read at the slots' keys, `O(length * K)`).
        training: bool, whether dropout is active.
        return_attention_scores: bool. If `True`, also returns the attention
            weights: `(batch, num_heads, length, length)` for dense patterns,
            `(batch, num_heads, length, K)` over the pattern's key slots for
            sparse ones.
        use_causal_mask: bool, whether a query also ignores the keys after
            it, as in `keras.layers.MultiHeadAttention`. A sparse pattern
            takes it only if its slots reach backward (it has
            `static_offsets`), and then changes nothing.

    The layer can also be called like `keras.layers.MultiHeadAttention`
    for self-attention: `layer(query=x, value=x)` or `layer(x, x)`, with
    an optional `key=x`. `value` and `key` must then be the `query` tensor
    itself; cross-attention is refused with a `ValueError`. An
    `attention_mask` may be `(batch, 1, length)`, as KerasHub passes it;
    the `cache` arguments of KerasHub's cached attention are taken only as
    `None`. `keras_attn.interop.convert_attention` gives an existing model
    this layer in place of its Keras attention.

    Returns:
        Tensor of shape `(batch, length, output_dim)`, and the attention
        weights if `return_attention_scores=True`.

    Example:

    >>> x = keras.Input(shape=(None, 16))
    >>> y = MultiHeadSelfAttention(num_heads=2, key_dim=8)(x)
    >>> model = keras.Model(x, y)
    >>> model(np.ones((3, 5, 16))).shape
    (3, 5, 16)

    References:
        - [Vaswani et al., 2017](https://arxiv.org/abs/1706.03762)
        - [Chiang & Cholak, 2022](https://arxiv.org/abs/2202.12172)
    """

    def __init__(
        self,
        num_heads: int,
        key_dim: int,
        value_dim: int | None = None,
        output_dim: int | None = None,
        dropout: float = 0.0,
        use_bias: bool = True,
        output_use_bias: bool | None = None,
        attention_pattern: str | AttentionPattern | dict = "dense",
        logit_scale: str = "none",
        additive_mask: float | None = None,
        qk_scale: float | None = None,
        kernel_initializer: Initializer = "glorot_uniform",
        bias_initializer: Initializer = "zeros",
        kernel_regularizer: str | keras.regularizers.Regularizer | dict | None = None,
        bias_regularizer: str | keras.regularizers.Regularizer | dict | None = None,
        seed: int | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        if isinstance(attention_pattern, dict):
            attention_pattern = keras.saving.deserialize_keras_object(attention_pattern)
        if not isinstance(attention_pattern, AttentionPattern) and not (
            isinstance(attention_pattern, str) and attention_pattern in DENSE_PATTERNS
        ):
            raise ValueError(
                f"`attention_pattern` must be one of {DENSE_PATTERNS} or an `AttentionPattern`. "
                f"Received: attention_pattern={attention_pattern!r}"
            )
        self.num_heads = check_int("num_heads", num_heads)
        self.key_dim = check_int("key_dim", key_dim)
        self.value_dim = check_optional_int("value_dim", value_dim) or self.key_dim
        self.output_dim = check_optional_int("output_dim", output_dim)
        self.dropout = check_rate("dropout", dropout)
        self.use_bias = check_bool("use_bias", use_bias)
        self.output_use_bias = (
            self.use_bias
            if output_use_bias is None
            else check_bool("output_use_bias", output_use_bias)
        )
        self.attention_pattern = attention_pattern
        self.logit_scale = check_choice("logit_scale", logit_scale, LOGIT_SCALES)
        self.qk_scale = None if qk_scale is None else check_positive("qk_scale", qk_scale)
        self.additive_mask = (
            None
            if additive_mask is None
            else check_float("additive_mask", additive_mask, high=0.0, high_open=True)
        )
        if self.additive_mask is not None and self.is_sparse:
            raise ValueError(
                "`additive_mask` only applies to the dense patterns. "
                f"Received: additive_mask={additive_mask!r} with "
                f"attention_pattern={attention_pattern!r}"
            )
        self.kernel_initializer = keras.initializers.get(kernel_initializer)
        self.bias_initializer = keras.initializers.get(bias_initializer)
        self.kernel_regularizer = keras.regularizers.get(kernel_regularizer)
        self.bias_regularizer = keras.regularizers.get(bias_regularizer)
        self.seed = check_optional_int("seed", seed, minimum=0)
        self.supports_masking = True
        self._input_dim = None
        self._dropout_layer = keras.layers.Dropout(
            self.dropout, seed=self.seed, dtype=self.dtype_policy
        )

    @property
    def is_sparse(self):
        return isinstance(self.attention_pattern, AttentionPattern)

    @property
    def query_dense(self):
        return self._query_dense

    @property
    def key_dense(self):
        return self._key_dense

    @property
    def value_dense(self):
        return self._value_dense

    @property
    def output_dense(self):
        return self._output_dense

    def build(self, input_shape):
        if len(input_shape) != 3:
            raise ValueError(
                "`inputs` must have rank 3, (batch, length, dim). "
                f"Received: input_shape={input_shape}"
            )
        dim = input_shape[-1]
        self._input_dim = dim
        output_dim = self.output_dim or dim
        self._query_dense = self.make_projection(
            "query", "abc,cde->abde", (None, self.num_heads, self.key_dim)
        )
        self._key_dense = self.make_projection(
            "key", "abc,cde->abde", (None, self.num_heads, self.key_dim)
        )
        self._value_dense = self.make_projection(
            "value", "abc,cde->abde", (None, self.num_heads, self.value_dim)
        )
        self._output_dense = self.make_projection(
            "attention_output", "abcd,cde->abe", (None, output_dim), self.output_use_bias
        )
        self._query_dense.build(input_shape)
        self._key_dense.build(input_shape)
        self._value_dense.build(input_shape)
        self._output_dense.build((input_shape[0], input_shape[1], self.num_heads, self.value_dim))

    def make_projection(
        self, name: str, equation: str, output_shape: Shape, use_bias: bool | None = None
    ) -> keras.layers.Layer:
        """Creates one of the four projections ("query", "key", "value",
        "attention_output") as an `EinsumDense`.

        Subclasses that project differently (for example with a causal
        convolution) override this method and can build their sublayer with
        `projection_kwargs(name)`. `use_bias=None` follows `use_bias`.
        """
        use_bias = self.use_bias if use_bias is None else use_bias
        bias_axes = equation.split("->")[1][2:] if use_bias else None
        return _ProjectionDense(
            equation,
            output_shape=output_shape,
            bias_axes=bias_axes,
            **self.projection_kwargs(name),
        )

    def projection_kwargs(self, name: str) -> dict[str, Any]:
        """Initializers (fresh copies), regularizers, dtype and name of a projection."""
        return {
            "kernel_initializer": clone_initializer(self.kernel_initializer),
            "bias_initializer": clone_initializer(self.bias_initializer),
            "kernel_regularizer": self.kernel_regularizer,
            "bias_regularizer": self.bias_regularizer,
            "dtype": self.dtype_policy,
            "name": name,
        }

    def project_queries_and_keys(
        self, inputs: Tensor, mask: Tensor | None = None
    ) -> tuple[Tensor, Tensor]:
        """Returns `(query, key)`, each `(batch, length, num_heads, key_dim)`.

        Subclasses that compute queries and keys differently (for example
        with a causal convolution) override this method. `mask`, the
        `(batch, length)` padding mask or `None`, lets a projection that
        mixes positions ignore padded inputs.
        """
        return self._query_dense(inputs), self._key_dense(inputs)

    def call(
        self,
        inputs: Tensor,
        mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        attention_mask: Tensor | None = None,
        training: bool | None = None,
        return_attention_scores: bool = False,
        use_causal_mask: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        attention_mask = self.full_attention_mask(inputs, attention_mask, use_causal_mask)
        self.validate_call_inputs(inputs, mask, head_mask, attention_mask)
        if static_size(inputs.shape[1]) == 0:
            return self._empty_outputs(inputs, return_attention_scores)
        inputs = _without_keras_mask(inputs)
        mask, head_mask, attention_mask = self._checked_masks(
            inputs, mask, head_mask, attention_mask
        )
        query, key = self.project_queries_and_keys(inputs, mask)
        value = self._value_dense(inputs)  # (batch, length, heads, value_dim)
        if self.is_sparse:
            attention = self._sparse_attention
        else:
            attention = functools.partial(self._dense_attention, scores=return_attention_scores)
        context, scores = self._attend(
            query, key, value, mask, attention_mask, attention, training=training
        )
        if head_mask is not None:
            context = context * self._broadcast_head_mask(head_mask, context.dtype)
        output = self._output_dense(context)  # (batch, length, output_dim)
        if return_attention_scores:
            return output, scores
        return output

    def __call__(self, *args, **kwargs):
        if "query" in kwargs or _is_keras_value(args):
            args, kwargs = _self_attention_arguments(args, kwargs)
        return super().__call__(*args, **kwargs)

    def full_attention_mask(
        self, inputs: Tensor, attention_mask: Tensor | None, use_causal_mask: bool = False
    ) -> Tensor | None:
        """The boolean `(batch, length, length)` mask of an attention call.

        A `(batch, 1, length)` mask (the same keys for every query) is
        broadcast over the queries, and `use_causal_mask=True` adds the causal
        mask to a `"dense"` pattern. `None` is returned when there is no mask.
        """
        causal = self._adds_causal_mask(use_causal_mask)
        if attention_mask is None and not causal:
            return None
        batch, length = ops.shape(inputs)[0], ops.shape(inputs)[1]
        full = ops.ones((batch, length, length), "bool")
        if attention_mask is not None:
            if _same_for_every_query(attention_mask):
                attention_mask = ops.broadcast_to(attention_mask, (batch, length, length))
            full = ops.cast(attention_mask, "bool")
        if not causal:
            return full
        positions = ops.arange(0, length)
        return ops.logical_and(full, positions[:, None] >= positions[None, :])

    def _adds_causal_mask(self, use_causal_mask):
        """Whether `use_causal_mask` adds a causal mask (only to the `"dense"` pattern)."""
        if not check_bool("use_causal_mask", use_causal_mask) or not self.is_sparse:
            return use_causal_mask and self.attention_pattern == "dense"
        if self.attention_pattern.static_offsets(2) is None:
            raise ValueError(
                "`use_causal_mask=True` takes a sparse pattern only if its slots reach backward "
                f"(it has `static_offsets`). Received: attention_pattern={self.attention_pattern!r}"
            )
        return False

    def attend_heads(
        self,
        inputs: Tensor,
        heads: Tensor,
        head_mask: Tensor | None = None,
        mask: Tensor | None = None,
        training: bool | None = None,
    ) -> Tensor:
        """Self-attention of `inputs` through a subset of the heads of each example.

        What `call` computes with every other head masked out (its
        `qk_scale`, log-length scale, additive mask, causal pattern and
        dropout included), but the projection kernels are gathered to the
        heads `heads` of each example, so the other heads cost nothing. A
        hook for models that skip heads and tokens, such as AdaViT's fast
        path, which runs it on the tokens it gathers. Dense patterns and
        the core's own projections only. Heads shared by every example,
        `(h,)`, slice each kernel once; heads per example, `(batch, h)`,
        gather a kernel per example.

        Args:
            inputs: `(batch, length, dim)`.
            heads: int `(h,)` or `(batch, h)`, the heads every example or
                each example computes.
            head_mask: optional `(batch, h)` multiplier of each computed
                head's output, such as 0 for a slot that pads `heads`.
            mask: optional boolean `(batch, length)` padding mask.
            training: bool, whether dropout is active.

        Returns:
            `(batch, length, output_dim)`.
        """
        self._check_head_subset()
        check_shape("inputs", inputs, (None, None, self._input_dim))
        batch = inputs.shape[0]
        if len(heads.shape) != 1:
            check_shape("heads", heads, (batch, None))
        check_shape("head_mask", head_mask, (batch, heads.shape[-1]))
        check_shape("mask", mask, (batch, inputs.shape[1]))
        heads = ops.cast(heads, "int32")
        query = _project_heads(self._query_dense, inputs, heads)  # (batch, length, h, key_dim)
        key = _project_heads(self._key_dense, inputs, heads)  # (batch, length, h, key_dim)
        value = _project_heads(self._value_dense, inputs, heads)  # (batch, length, h, value_dim)
        context, _ = self._attend(
            query, key, value, mask, None, self._dense_attention, training=training, scores=False
        )
        if head_mask is not None:
            context = context * ops.cast(head_mask, context.dtype)[:, None, :, None]
        output = self._output_dense
        kernel = ops.take(output.kernel, heads, axis=0)  # ([batch,] h, value_dim, output_dim)
        equation = "blhv,hvo->blo" if len(heads.shape) == 1 else "blhv,bhvo->blo"
        outputs = ops.einsum(equation, context, kernel)  # (batch, length, output_dim)
        return outputs if output.bias is None else add_bias(outputs, output.bias)

    def attend_last_positions(
        self,
        inputs: Tensor,
        count: int = 1,
        mask: Tensor | None = None,
        training: bool | None = None,
    ) -> Tensor:
        """Self-attention outputs at the last `count` positions only.

        What `call(inputs, mask=mask, training=training)[:, -count:]`
        returns, but only the last `count` positions are queries: their
        logits are `(count, length)` per head instead of `(length, length)`,
        and the layer that reads them (a next-item or next-token head that
        scores the last position) need not compute the others either. Every
        position is still a key. Active dropout draws its mask for the
        `(count, length)` weights it computes only, at the layer's rate: the
        outputs equal the full call's without dropout, and have the same
        distribution with it. Dense patterns only; the `qk_scale`,
        log-length scale and `additive_mask` apply as in `call`.

        Args:
            inputs: `(batch, length, dim)`.
            count: int in `[1, length]`, how many last positions to compute.
            mask: optional boolean `(batch, length)` padding mask.
            training: bool, whether dropout is active.

        Returns:
            `(batch, count, output_dim)`.

        Example:

        >>> layer = MultiHeadSelfAttention(2, 4, attention_pattern="causal")
        >>> x = np.random.normal(size=(1, 6, 8))
        >>> full, last = layer(x), layer.attend_last_positions(x, count=2)
        >>> bool(np.allclose(full[:, -2:], last, atol=1e-6))
        True
        """
        if self.is_sparse:
            raise ValueError(
                "`attend_last_positions` supports the dense patterns only. "
                f"Received: attention_pattern={self.attention_pattern!r}"
            )
        check_shape("inputs", inputs, (None, None, self._input_dim))
        count = check_last_positions("count", count, inputs.shape[1])
        check_shape("mask", mask, (inputs.shape[0], inputs.shape[1]))
        inputs = _without_keras_mask(inputs)
        if self._projects_each_position():
            query = self._query_dense(inputs[:, -count:])  # (batch, count, heads, key_dim)
            key = self._key_dense(inputs)  # (batch, length, heads, key_dim)
        else:  # a projection that mixes positions sees the whole sequence
            query, key = self.project_queries_and_keys(inputs, mask)
            query = query[:, -count:]  # (batch, count, heads, key_dim)
        value = self._value_dense(inputs)  # (batch, length, heads, value_dim)
        context, _ = self._attend(
            query,
            key,
            value,
            mask,
            None,
            self._explicit_attention,
            training=training,
            last_positions=True,
        )
        return self._output_dense(context)  # (batch, count, output_dim)

    def _attend(self, query, key, value, mask, attention_mask, attention, **options):
        """`attention(query, key, value, mask, attention_mask, **options)`, keys hidden.

        Returns `(context, scores)`. float16 queries and keys become float32
        (float16 overflows at 65504; bfloat16 has float32's range and keeps
        its dtype); the keys no query may read are hidden, and queries that
        see a position that is not finite get NaN outputs (see
        `_hide_keys`). With the option `last_positions=True`, the queries
        are the last `query.shape[1]` positions; otherwise every position is
        one.
        """
        if keras.backend.standardize_dtype(query.dtype) == "float16":
            query, key = ops.cast(query, "float32"), ops.cast(key, "float32")
        key, value, broken = self._hide_keys(key, value, mask, attention_mask)
        context, scores = attention(query, key, value, mask, attention_mask, **options)
        if broken is None:
            return context, scores
        if options.get("last_positions", False):
            broken = broken[:, -ops.shape(query)[1] :]  # (batch, queries) or (batch, 1)
        context = ops.where(ops.expand_dims(broken, (2, 3)), float("nan"), context)
        if scores is not None:
            scores = ops.where(ops.expand_dims(broken, (1, 3)), float("nan"), scores)
        return context, scores

    def _projects_each_position(self):
        """Whether the layer projects with the core's own position-wise projections."""
        own = MultiHeadSelfAttention.project_queries_and_keys
        return type(self).project_queries_and_keys is own and all(
            type(dense) is _ProjectionDense
            for dense in (self._query_dense, self._key_dense, self._value_dense, self._output_dense)
        )

    def _check_head_subset(self):
        if self.is_sparse:
            raise ValueError(
                "`attend_heads` supports the dense patterns only. "
                f"Received: attention_pattern={self.attention_pattern!r}"
            )
        if not self._projects_each_position():
            raise ValueError(
                "`attend_heads` needs the core's own projections. "
                f"Received: a {type(self).__name__} that projects differently"
            )

    def validate_call_inputs(
        self,
        inputs: Tensor,
        mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        attention_mask: Tensor | None = None,
    ) -> None:
        """Raises a `ValueError` naming the argument whose static shape is wrong.

        `mask` must be `(batch, length)`, `attention_mask`
        `(batch, length, length)` and `head_mask`
        `(num_heads,)` or `(batch, num_heads)`, where `(batch, length, dim)`
        is the shape of `inputs` and `dim` the size the layer was built for.
        Without this, a mask of another shape could broadcast silently (for
        example over the heads when `batch == num_heads`).
        """
        check_shape("inputs", inputs, (None, None, self._input_dim))
        batch, length = inputs.shape[0], inputs.shape[1]
        check_shape("mask", mask, (batch, length))
        check_shape("attention_mask", attention_mask, (batch, length, length))
        check_shape("head_mask", head_mask, (self.num_heads,), (batch, self.num_heads))

    def _checked_masks(self, inputs, mask, head_mask, attention_mask):
        """`(mask, head_mask, attention_mask)`, checked when run as well.

        `validate_call_inputs` compares static sizes; in a graph traced with
        unknown sizes these checks make the graph fail when run instead of
        broadcasting or slicing a mask of another shape.
        """
        batch, length = ops.shape(inputs)[:2]
        heads = self.num_heads
        return (
            shape_checked_when_run("mask", mask, (batch, length)),
            shape_checked_when_run("head_mask", head_mask, (heads,), (batch, heads)),
            shape_checked_when_run("attention_mask", attention_mask, (batch, length, length)),
        )

    def _hide_keys(self, key, value, mask, attention_mask):
        """`(key, value, broken)`: zeros at the positions a query must not see.

        A key weighted by zero still reaches the output through `0 * value`,
        which is NaN when the value is NaN or inf. So masked (padded)
        positions are replaced by zeros, and so are positions whose key or
        value is not finite when a query may not see them (the future of a
        causal query, or an `attention_mask`). With `additive_mask`, masked
        positions are replaced only where they are not finite: a query with
        no visible key attends over them, as in the code it reproduces.
        `broken`, boolean `(batch, length)` or `(batch, 1)`, marks the
        queries that see a position that is not finite: their outputs are
        NaN, as without the replacement. It is `None` where no query can
        miss a position that another one sees.
        """
        visible = None if mask is None else ops.cast(mask, "bool")  # (batch, length)
        hides_keys = self.attention_pattern == "causal" or attention_mask is not None
        finite = None
        if hides_keys or (self.additive_mask is not None and visible is not None):
            finite = ops.logical_and(_finite_positions(key), _finite_positions(value))
        broken = None
        if hides_keys:
            broken = self._rows_with_keys(_all_of(visible, ops.logical_not(finite)), attention_mask)
        keep = finite if self.additive_mask is not None else _all_of(visible, finite)
        if keep is None:
            return key, value, broken
        keep = ops.expand_dims(keep, (2, 3))  # (batch, length, 1, 1)
        return ops.where(keep, key, 0.0), ops.where(keep, value, 0.0), broken

    def num_keys(self, length: int | None) -> int | None:
        """Keys per query for a static `length`: `length`, or the pattern's `K`."""
        if not self.is_sparse or length is None:
            return length
        return int(self.attention_pattern.key_indices(length)[0].shape[1])

    def _empty_outputs(self, inputs, return_attention_scores):
        """Outputs of a length-0 sequence, the same on every backend."""
        batch = ops.shape(inputs)[0]
        output = ops.zeros((batch, 0, self.output_dim or self._input_dim), self.compute_dtype)
        if not return_attention_scores:
            return output
        scores = ops.zeros((batch, self.num_heads, 0, self.num_keys(0)), self.compute_dtype)
        return output, scores

    def compute_output_shape(self, input_shape):
        return (*input_shape[:-1], self.output_dim or input_shape[-1])

    def compute_output_spec(
        self,
        inputs: Tensor,
        mask: Tensor | None = None,
        head_mask: Tensor | None = None,
        attention_mask: Tensor | None = None,
        training: bool | None = None,
        return_attention_scores: bool = False,
        use_causal_mask: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        # Written out rather than traced: with an unknown length, JAX traces
        # a symbolic length, whose key count a sparse pattern cannot compute.
        self._adds_causal_mask(use_causal_mask)
        if attention_mask is not None and _same_for_every_query(attention_mask):
            shape = (attention_mask.shape[0], inputs.shape[1], attention_mask.shape[2])
            attention_mask = keras.KerasTensor(shape, attention_mask.dtype)
        self.validate_call_inputs(inputs, mask, head_mask, attention_mask)
        batch, length = inputs.shape[0], inputs.shape[1]
        output = keras.KerasTensor(self.compute_output_shape(inputs.shape), self.compute_dtype)
        if not return_attention_scores:
            return output
        keys = self.num_keys(static_size(length))
        scores = keras.KerasTensor((batch, self.num_heads, length, keys), self.compute_dtype)
        return output, scores

    # The blockwise path of the dense patterns: `None` (the default) runs it
    # from `BLOCKWISE_MIN_LENGTH` keys on XLA CPU (JAX and TensorFlow without
    # an accelerator) and never elsewhere, where fused kernels do better; an
    # int runs it from that length on every backend.
    blockwise_min_length: int | None = None
    blockwise_block_size: int = BLOCKWISE_BLOCK_SIZE
    blockwise_key_block_size: int = BLOCKWISE_KEY_BLOCK_SIZE

    def _runs_blockwise(self, length, mask, attention_mask, training, scores):
        """Whether the dense step runs block by block (`_blockwise_attention`)."""
        threshold = self.blockwise_min_length
        if threshold is None and _xla_on_cpu():
            threshold = BLOCKWISE_MIN_LENGTH
        length = static_size(length)
        if threshold is None or length is None or length < threshold:
            return False
        plain = mask is None and attention_mask is None and self.additive_mask is None
        return plain and not scores and not (self.dropout > 0 and bool(training))

    def _blockwise_attention(self, query, key, value):
        """Dense or causal attention one block of queries at a time.

        Each block of `blockwise_block_size` queries (at most half the
        length; more when the length exceeds `BLOCKWISE_MAX_BLOCKS` such
        blocks) attends to the keys it may see (under `"causal"`, those up
        to its last query: fully masked blocks are never computed) in a loop
        over blocks of `blockwise_key_block_size` keys with an online
        softmax; the gradient recomputes each step's weights from the saved
        log-sum-exp, so
        neither pass holds more than a `(block, key_block)` slice of the
        weights per head. Padding masks, `attention_mask`, `additive_mask`,
        active dropout and attention scores take the other paths.
        """
        length = query.shape[1]
        scale = self.query_key_scale
        if self.logit_scale == "log_length":
            scale *= math.log(length)  # no mask: every position counts
        causal = self.attention_pattern == "causal"
        block = min(self.blockwise_block_size, length // 2)
        block = max(block, -(-length // BLOCKWISE_MAX_BLOCKS))
        key_block = self.blockwise_key_block_size
        return _blockwise(query, key, value, scale, causal, block, key_block)

    def _dense_attention(self, query, key, value, mask, attention_mask, training, scores):
        if self._runs_blockwise(ops.shape(query)[1], mask, attention_mask, training, scores):
            return self._blockwise_attention(query, key, value), None
        if self._can_fuse(query, value, training, scores):
            return self._fused_attention(query, key, value, mask, attention_mask), None
        return self._explicit_attention(query, key, value, mask, attention_mask, training)

    def _explicit_attention(
        self, query, key, value, mask, attention_mask, training, last_positions=False
    ):
        """Dense attention through the `(queries, length)` weights of each head.

        With `last_positions`, the queries are the last `query.shape[1]` of
        the `length` positions; otherwise every position is a query.
        """
        query = self._scaled(query)
        length = ops.shape(key)[1]
        logits = ops.einsum("bqhd,bkhd->bhqk", query, key)  # (batch, heads, queries, length)
        causal = self.attention_pattern == "causal"
        allowed = _allowed_keys(length, mask, attention_mask, causal)
        if allowed is None:
            allowed = ops.ones((1, length, length), dtype="bool")
        if last_positions:
            allowed = allowed[:, -ops.shape(query)[1] :]  # (batch or 1, 1 or queries, length)
        allowed = ops.expand_dims(allowed, 1)  # (batch or 1, 1, 1 or queries, length)
        weights = self._masked_softmax(
            logits, allowed, mask, training, length if last_positions else None
        )
        context = ops.einsum("bhqk,bkhd->bqhd", weights, value)  # (batch, queries, heads, v_dim)
        return context, weights

    def _can_fuse(self, query, value, training, scores):
        """Whether `ops.dot_product_attention` (fused kernels) computes the step."""
        dropout_active = self.dropout > 0 and bool(training)
        exact_mask = self.additive_mask is None
        fusable = exact_mask and not (scores or dropout_active)
        return fusable and query.shape[-1] == value.shape[-1]

    def _fused_attention(self, query, key, value, mask, attention_mask):
        """Dense attention through `ops.dot_product_attention`.

        Its softmax runs in float32 (the XLA paths cast the logits, the
        cuDNN and flash kernels accumulate in float32); under float16 the
        queries and keys come in float32, and so the whole step runs in
        float32. The log-length scale is folded into the query, and rows
        with no allowed key are zeroed (the kernel would give them uniform
        weights).
        """
        if self.logit_scale == "log_length":
            query = query * ops.cast(self._log_length(ops.shape(query)[1], mask), query.dtype)
        # (batch, 1, 1 or length, length), the causal part left to the kernel.
        fused_mask = _allowed_keys(ops.shape(query)[1], mask, attention_mask, causal=False)
        if fused_mask is not None:
            fused_mask = ops.expand_dims(fused_mask, 1)
        context = ops.dot_product_attention(
            query,
            key,
            ops.cast(value, query.dtype),
            mask=fused_mask,
            scale=self.query_key_scale,
            is_causal=self.attention_pattern == "causal",
        )  # (batch, length, heads, value_dim)
        context = ops.cast(context, value.dtype)
        rows = self._rows_with_keys(mask, attention_mask)
        if rows is None:
            return context
        return ops.where(ops.expand_dims(rows, (2, 3)), context, ops.zeros((), context.dtype))

    def _rows_with_keys(self, mask, attention_mask):
        """Boolean `(batch, length)` (or `(batch, 1)`): queries with a visible key."""
        causal = self.attention_pattern == "causal"
        if attention_mask is not None:
            length = ops.shape(attention_mask)[-1]
            if self.is_sparse:  # the keys of the pattern's slots only
                indices, valid = self.attention_pattern.key_indices(length)  # (length, K) each
                allowed = _slot_allowed(indices, valid, mask, attention_mask)  # (b, 1, length, K)
                return ops.squeeze(ops.any(allowed, axis=-1), axis=1)  # (batch, length)
            return ops.any(_allowed_keys(length, mask, attention_mask, causal), axis=-1)
        if mask is None:
            return None  # every query sees itself, or every key
        if causal:
            return ops.cumsum(ops.cast(mask, "int32"), axis=1) > 0  # (batch, length)
        return ops.any(ops.cast(mask, "bool"), axis=1, keepdims=True)  # (batch, 1)

    @property
    def query_key_scale(self):
        """The factor of the query-key dot products: `qk_scale` or `1 / sqrt(key_dim)`."""
        return self.qk_scale if self.qk_scale is not None else 1.0 / math.sqrt(self.key_dim)

    def _scaled(self, query):
        """`query * query_key_scale`, the scale of the explicit paths."""
        return query * ops.cast(self.query_key_scale, query.dtype)

    def _sparse_attention(self, query, key, value, mask, attention_mask, training):
        query = self._scaled(query)
        length = ops.shape(query)[1]
        indices, valid = self.attention_pattern.key_indices(length)  # (length, K) each
        allowed = _slot_allowed(indices, valid, mask, attention_mask)  # (b or 1, 1, length, K)
        offsets = self.attention_pattern.static_offsets(length)
        if offsets is None or not self._shifts_sparse_keys(length):
            return self._gathered_attention(query, key, value, indices, allowed, mask, training)
        return self._shifted_attention(query, key, value, allowed, mask, training, offsets)

    # How a pattern of fixed offsets is computed: `None` (the default) shifts
    # the keys and values on JAX and TensorFlow, and on torch from
    # `TORCH_SHIFTED_MIN_LENGTH` positions: below it, torch's loop over the
    # offsets costs more in kernel launches than gathering K copies of the
    # keys and values (benchmarks/attention_speed.py). A bool forces the
    # shifted path (`True`) or the gathered one (`False`).
    shifted_sparse_keys: bool | None = None

    def _shifts_sparse_keys(self, length):
        if self.shifted_sparse_keys is not None:
            return self.shifted_sparse_keys
        if keras.backend.backend() != "torch":
            return True
        size = static_size(length)
        return size is not None and size >= TORCH_SHIFTED_MIN_LENGTH

    def _shifted_attention(self, query, key, value, allowed, mask, training, offsets):
        """Attention over keys `i - offset`, from shifted views of keys and values.

        One logit per offset and a running sum over offsets for the context:
        no key- or value-sized tensor is copied per slot, so the step keeps
        `O(L * K)` logits and `O(L * heads * head_dim)` activations.
        """
        logits = _offset_logits(query, key, offsets)  # (batch, length, heads, K)
        logits = ops.transpose(logits, (0, 2, 1, 3))  # (batch, heads, length, K)
        weights = self._masked_softmax(logits, allowed, mask, training)  # (batch, heads, length, K)
        slot_weights = ops.transpose(weights, (0, 2, 1, 3))  # (batch, length, heads, K)
        context = _offset_context(slot_weights, value, offsets)  # (batch, length, heads, value_dim)
        return context, weights

    def _gathered_attention(self, query, key, value, indices, allowed, mask, training):
        gathered_keys = _gather_positions(key, indices)  # (length, K, batch, heads, key_dim)
        gathered_values = _gather_positions(value, indices)  # (length, K, batch, heads, value_dim)
        # Products and sums rather than einsums: as a matmul, each query is
        # a batch of its own (1, key_dim) x (key_dim, K) product.
        by_position = ops.transpose(query, (1, 0, 2, 3))[:, None]  # (length, 1, batch, heads, dim)
        logits = ops.sum(by_position * gathered_keys, axis=-1)  # (length, K, batch, heads)
        logits = ops.transpose(logits, (2, 3, 0, 1))  # (batch, heads, length, K)
        weights = self._masked_softmax(logits, allowed, mask, training)
        slot_weights = ops.transpose(weights, (2, 3, 0, 1))[..., None]  # (length, K, b, heads, 1)
        context = ops.sum(slot_weights * gathered_values, axis=1)  # (length, batch, heads, v_dim)
        return ops.transpose(context, (1, 0, 2, 3)), weights

    def _masked_softmax(self, logits, allowed, mask, training, length=None):
        """Softmax weights `(batch, heads, queries, keys)` of the allowed keys, dropped out.

        `length`, the sequence's length, is given when the queries are its
        last positions only (`None`: every position is a query).
        """
        logits = ops.cast(logits, "float32")
        if self.logit_scale == "log_length":
            positions = ops.shape(logits)[2] if length is None else length
            logits = logits * self._log_length(positions, mask)
        if self.additive_mask is None:
            logits = ops.where(allowed, logits, MASKED_LOGIT)
            weights = ops.softmax(logits, axis=-1)
            # A row with no allowed key gets zero weights instead of a uniform leak.
            weights = ops.where(ops.any(allowed, axis=-1, keepdims=True), weights, 0.0)
        else:
            weights = ops.softmax(logits + ops.where(allowed, 0.0, self.additive_mask), axis=-1)
        weights = ops.cast(weights, self.compute_dtype)
        return self._dropout_layer(weights, training=training)

    def _log_length(self, length, mask):
        """`log n` per example, `(batch, 1, 1, 1)`, n = unmasked positions."""
        if mask is None:
            return ops.reshape(ops.log(ops.cast(length, "float32")), (1, 1, 1, 1))
        lengths = ops.sum(ops.cast(mask, "float32"), axis=-1)  # (batch,)
        return ops.reshape(ops.log(ops.maximum(lengths, 1.0)), (-1, 1, 1, 1))

    def _broadcast_head_mask(self, head_mask, dtype):
        head_mask = ops.cast(head_mask, dtype)
        if len(head_mask.shape) == 1:
            return head_mask[None, None, :, None]  # (1, 1, heads, 1)
        return head_mask[:, None, :, None]  # (batch, 1, heads, 1)

    def compute_mask(self, inputs, mask=None):
        return mask

    def get_config(self):
        arguments = (
            "num_heads",
            "key_dim",
            "value_dim",
            "output_dim",
            "dropout",
            "use_bias",
            "output_use_bias",
            "attention_pattern",
            "logit_scale",
            "qk_scale",
            "additive_mask",
            "kernel_initializer",
            "bias_initializer",
            "kernel_regularizer",
            "bias_regularizer",
            "seed",
        )
        return {**super().get_config(), **argument_config(self, arguments)}


def _slot_allowed(indices, valid, mask, attention_mask=None):
    """Boolean `(batch or 1, 1, length, K)`: the used key slots whose key is not masked.

    `mask` masks keys, `(batch, length)`; `attention_mask`, `(batch, length,
    length)`, is read at each query's slot keys.
    """
    allowed = ops.expand_dims(ops.cast(valid, "bool"), 0)  # (1, length, K)
    if mask is not None:
        allowed = ops.logical_and(allowed, _lookup(mask, indices))  # (batch, length, K)
    if attention_mask is not None:
        length = ops.shape(indices)[0]
        rows = ops.arange(0, length, dtype=indices.dtype)[:, None]  # (length, 1)
        # (batch, length * length): query i's row of keys from entry i * length.
        flat = ops.reshape(attention_mask, (ops.shape(attention_mask)[0], -1))
        allowed = ops.logical_and(allowed, _lookup(flat, rows * length + indices))
    return ops.expand_dims(allowed, 1)  # (batch or 1, 1, length, K)


def _lookup(values, entries):
    """Boolean `values[:, entries]` of a `(batch, n)` mask, `(batch, length, K)`.

    A row lookup through `_gather_positions`, which exports to ONNX from
    torch (`take` on axis 1 does not).
    """
    as_positions = ops.expand_dims(ops.cast(values, "int32"), (2, 3))  # (batch, n, 1, 1)
    picked = _gather_positions(as_positions, entries)[..., 0, 0]  # (length, K, batch)
    return ops.transpose(picked, (2, 0, 1)) > 0  # (batch, length, K)


def _without_keras_mask(inputs):
    """`inputs` as a new tensor without a Keras mask attached.

    The layer handles the mask itself, so its projections must not warn that
    they drop it.
    """
    return ops.add(inputs, ops.zeros((), inputs.dtype))


def _allowed_keys(length, mask, attention_mask, causal):
    """Boolean `(batch or 1, 1 or length, length)`: whether query `i` may see key `j`.

    The logical and of the causal mask, the padding `mask` (on the keys) and
    `attention_mask`, of those that apply; `None` when every key is visible.
    """
    # Boolean masks gain axes with `expand_dims`: indexing with `None` becomes
    # a strided slice that the TFLite converter keeps as a TensorFlow op.
    allowed = []
    if causal:
        positions = ops.arange(0, length)
        causal_mask = ops.expand_dims(positions, 1) >= ops.expand_dims(positions, 0)
        allowed.append(ops.expand_dims(causal_mask, 0))  # (1, length, length)
    if mask is not None:
        allowed.append(ops.expand_dims(ops.cast(mask, "bool"), 1))  # (batch, 1, length)
    if attention_mask is not None:
        allowed.append(ops.cast(attention_mask, "bool"))  # (batch, length, length)
    return _all_of(*allowed)


def _all_of(*masks):
    """The logical and of the masks that are not `None` (`None` if none is)."""
    masks = [m for m in masks if m is not None]
    if not masks:
        return None
    return functools.reduce(ops.logical_and, masks)


def _finite_positions(x):
    """Boolean `(batch, length)`: whether every entry of `x[:, i]` is finite.

    A sum of `x * 0` rather than `ops.all`: it is NaN exactly where an entry
    is NaN or inf, never overflows, and torch's ONNX exporter lowers it (its
    TorchScript exporter fails on `all` over several axes).
    """
    return ops.isfinite(ops.sum(x * 0, axis=(2, 3)))


def _is_keras_value(args):
    """Whether positional `args` are `(query, value, ...)`, a Keras attention call."""
    return len(args) > 1 and args[1] is not None and len(getattr(args[1], "shape", ())) == 3


def _same_for_every_query(attention_mask):
    """Whether an attention mask is `(batch, 1, length)`, to broadcast over the queries."""
    return len(attention_mask.shape) == 3 and attention_mask.shape[1] == 1


def _self_attention_arguments(args, kwargs):
    """`(args, kwargs)` of a `keras.layers.MultiHeadAttention`-style call, as the core's.

    `query` becomes `inputs`; `value` and `key` must be `query` itself, and
    KerasHub's `cache` arguments `None`.
    """
    kwargs = dict(kwargs)
    names = ("query", "value", "key")
    if len(args) > len(names) or ("query" in kwargs and args):
        raise ValueError(
            "Call the layer with `inputs`, or with `query`, `value` and `key` as in "
            "`keras.layers.MultiHeadAttention`. Received: "
            f"{len(args)} positional arguments and keywords {sorted(kwargs)}"
        )
    given = dict(zip(names, args, strict=False))
    given.update({name: kwargs.pop(name) for name in names if name in kwargs})
    query = given["query"]
    for name in ("value", "key"):
        if given.get(name) is not None and given[name] is not query:
            raise ValueError(
                f"`MultiHeadSelfAttention` computes self-attention: `{name}` must be the "
                f"`query` tensor itself (cross-attention is not supported). Received: {name} of "
                f"shape {given[name].shape}, a tensor other than query"
            )
    for name in ("cache", "cache_update_index"):
        if kwargs.pop(name, None) is not None:
            raise ValueError(
                f"`MultiHeadSelfAttention` has no cached decoding. "
                f"Received: {name} that is not None"
            )
    return (query,), kwargs


def add_bias(x, bias):
    """`x + bias`, broadcast from the last axes on every backend.

    Keras' TensorFlow `ops.add(x, bias)` turns a bias with one axis of size
    above 1 into `tf.nn.bias_add`, which adds it along axis 1 when that
    axis has its size and the last one does not: a `(num_heads, 1)` bias
    (heads of size 1) went along the length axis when
    `length == num_heads`. `keras.layers.MultiHeadAttention` has the same
    error. With the bias first, the sum broadcasts like numpy.
    """
    return ops.add(bias, x)


def _project_heads(dense, inputs, heads):
    """`inputs` `(batch, length, dim)` through the heads `heads` `(h,)` or `(batch, h)`."""
    kernel = ops.take(dense.kernel, heads, axis=1)  # (dim, [batch,] h, head_dim)
    bias = None if dense.bias is None else ops.take(dense.bias, heads, axis=0)  # ([batch,] h, k)
    if len(heads.shape) == 1:  # one slice of the kernel for every example
        projected = ops.einsum("bld,dhk->blhk", inputs, kernel)  # (batch, length, h, head_dim)
        return projected if bias is None else add_bias(projected, bias)
    projected = ops.einsum("bld,dbhk->blhk", inputs, kernel)  # (batch, length, h, head_dim)
    return projected if bias is None else add_bias(projected, bias[:, None])  # (batch, 1, h, k)


class _ProjectionDense(keras.layers.EinsumDense):
    """`EinsumDense` whose bias is added by `add_bias`."""

    def call(self, inputs, training=None):
        outputs = ops.einsum(self.equation, inputs, self.kernel)
        if self.bias is None:
            return outputs
        return add_bias(outputs, self.bias)


class _Slots:
    """The slots of `offsets` that reach a key (`offset < length`), for a loop over them.

    `slot(n)` and `shift(n)` are the slot number and offset of the `n`-th
    reachable slot: Python ints when the loop index is one (`fori_loop`
    runs as a Python loop on torch), so each step slices statically with no
    read-back of a tensor index to the host, and int32 scalars read from a
    constant table when the loop is compiled (a `while` loop under XLA).
    The tables are made inside the step that reads them: made outside, they
    are arrays the loop body closes over, which jax2onnx cannot lower.
    """

    def __init__(self, offsets, length):
        used = [(slot, offset) for slot, offset in enumerate(offsets) if offset < length]
        self.slots = [slot for slot, _ in used]
        self.shifts = [offset for _, offset in used]
        self.count = len(used)
        self.reach = max(self.shifts, default=0)
        # torch's `fori_loop` is a Python loop that takes any carry.
        self.by_column = keras.backend.backend() == "torch"
        self.slot_major = self.by_column and length >= TORCH_SLOT_MAJOR_MIN_LENGTH

    def slot(self, n):
        return self.slots[n] if isinstance(n, int) else _read(self.slots, n)

    def shift(self, n):
        return self.shifts[n] if isinstance(n, int) else _read(self.shifts, n)

    def write(self, logits, n, column):
        """`logits` `(batch, length, heads, K)` with slot `slot(n)` set to `column`.

        On torch, whose `fori_loop` is a Python loop that takes any carry,
        the logits become a tuple of `K` columns `(batch, length, heads, 1)`,
        one of them replaced per offset and concatenated once by
        `_offset_loops`: writing into a tensor copies all of it per offset
        (about a seventh of a step at 8,192). TensorFlow's loop keeps its
        carry's structure, also run eagerly with an int index, so it writes a
        column into the tensor; under XLA a select, which exports to ONNX
        from TensorFlow (a dynamic update does not).
        """
        if self.by_column:
            if not isinstance(logits, tuple):
                logits = tuple(logits[..., k : k + 1] for k in range(logits.shape[-1]))
            slot = self.slots[n]
            return (*logits[:slot], column, *logits[slot + 1 :])
        if isinstance(n, int):
            return ops.slice_update(logits, (0, 0, 0, self.slots[n]), column)
        slot_ids = ops.arange(0, logits.shape[-1], dtype="int32")  # (K,)
        return ops.where(slot_ids == self.slot(n), column, logits)

    def columns(self, weights):
        """`weights` `(batch, length, heads, K)` as `weights(..., n)` reads them.

        On torch from `TORCH_SLOT_MAJOR_MIN_LENGTH` positions slot-major,
        `(K, batch, length, heads)` and contiguous, so that each slot's
        column is contiguous: read with a stride, a column touches every
        cache line of the weights. Unchanged elsewhere.
        """
        if not self.slot_major:
            return weights
        slot_major = ops.transpose(weights, (3, 0, 1, 2))  # (K, batch, length, heads)
        # Reshaped to two axes, a transposed tensor is copied into its new order.
        copied = ops.reshape(slot_major, (weights.shape[-1], -1))  # (K, batch * length * heads)
        return ops.reshape(copied, ops.shape(slot_major))

    def weights(self, weights, n):
        """`weights[..., slot(n), None]` of `columns(weights)`, `(batch, length, heads, 1)`."""
        if self.slot_major:
            return ops.expand_dims(weights[self.slots[n]], -1)
        if isinstance(n, int):
            return weights[..., self.slots[n], None]
        return ops.take(weights, self.slot(n), axis=-1)[..., None]


def _read(values, n):
    """`values[n]` for a list of ints and a tensor index, from an int32 constant."""
    return ops.take(ops.convert_to_tensor(values, "int32"), n)


def _gather_positions(x, indices):
    """`x[:, indices]` as `(*indices.shape, batch, heads, dim)`, rows of a 2-D table.

    A row lookup (`take` on axis 0 of a matrix) is one `Gather` in every
    export; torch's `take` on another axis exports to ONNX a `Squeeze` that
    ONNX Runtime rejects.
    """
    positions = ops.transpose(x, (1, 0, 2, 3))  # (length, batch, heads, dim)
    table = ops.reshape(positions, (ops.shape(x)[1], -1))  # (length, batch * heads * dim)
    rows = ops.take(table, ops.reshape(indices, (-1,)), axis=0)  # (length * K, batch * heads * dim)
    return ops.reshape(rows, (*ops.shape(indices), *ops.shape(positions)[1:]))


def _padded(x, before, after):
    """`x` with `before` and `after` zero steps around axis 1."""
    parts = [x]
    if before:
        parts.insert(0, ops.zeros((ops.shape(x)[0], before, *x.shape[2:]), x.dtype))
    if after:
        parts.append(ops.zeros((ops.shape(x)[0], after, *x.shape[2:]), x.dtype))
    return ops.concatenate(parts, axis=1) if len(parts) > 1 else x


def _window(padded, start, length):
    """`padded[:, start : start + length]`, `start` a Python int (a loop on torch) or a tensor."""
    if isinstance(start, int):  # a view, without op dispatch
        return padded[:, start : start + length]
    return ops.slice(padded, (0, start, 0, 0), (ops.shape(padded)[0], length, *padded.shape[2:]))


def _loop(count, step, initial, held):
    """`ops.fori_loop(0, count, ...)` of `step(n, state, held)`, `held` carried unchanged.

    The loop's step reads the arrays `held` from the carry, never from a
    closure: jax2onnx (ONNX export from JAX) lowers the arrays a loop body
    closes over as constants, which the model's traced inputs cannot be.
    Under XLA the unchanged carry is the same buffer at every step.
    """

    def body(n, carry):
        state, arrays = carry
        return step(n, state, arrays), arrays

    return ops.fori_loop(0, count, body, (initial, held))[0]


# The sums over offsets below run as loops (one shifted view alive at a
# time): written as unrolled Python loops, XLA materializes every shifted
# view, K copies of the keys and values. Each is a `(make_step, initial
# value)` pair; `make_step(slots)` returns the step and the arrays it
# reads, and `_offset_loops` runs several sums as one loop, so that the
# backward pass runs two loops over the offsets, not four.


def _offset_loops(offsets, length, *sums):
    """The totals of `sums`, `(make_step, initial)` pairs, from one loop over the slots."""
    slots = _Slots(offsets, length)
    steps, held = zip(*(make_step(slots) for make_step, _ in sums), strict=True)

    def step(n, totals, arrays):
        return tuple(
            step(n, total, *reads) for step, total, reads in zip(steps, totals, arrays, strict=True)
        )

    totals = _loop(slots.count, step, tuple(initial for _, initial in sums), held)
    # Logits written as columns (torch, `_Slots.write`) become one tensor.
    return tuple(ops.concatenate(t, axis=-1) if isinstance(t, tuple) else t for t in totals)


def _dots(a, b, offsets):
    """`a[:, i] . b[:, i - offset]` per head and offset, `(batch, length, heads, K)`."""

    def make_step(slots):
        back = slots.reach

        def step(n, logits, a, padded):
            view = _window(padded, back - slots.shift(n), b.shape[1])  # b[:, i - offset]
            # The sum over `dim` as a product with ones: written as a sum, JAX's
            # XLA CPU hands it to a reduce fusion that made the step 3-6x slower.
            summed = ops.ones((a.shape[-1], 1), a.dtype)  # (dim, 1)
            dots = ops.matmul(a * view, summed)  # (batch, length, heads, 1)
            return slots.write(logits, n, dots)

        return step, (a, _padded(b, back, 0))  # padded: (batch, back + length, heads, dim)

    slot_logits = ops.zeros_like(a[..., :1]) + ops.zeros((len(offsets),), a.dtype)
    return make_step, slot_logits  # (batch, length, heads, K)


def _mix(weights, b):
    """`sum_j weights[:, i, :, j] * b[:, i - offsets[j]]`, `(batch, length, heads, dim)`."""

    def make_step(slots):
        back = slots.reach

        def step(n, total, weights, padded):
            view = _window(padded, back - slots.shift(n), b.shape[1])  # b[:, i - offset]
            return total + slots.weights(weights, n) * view

        # padded: (batch, back + length, heads, dim)
        return step, (slots.columns(weights), _padded(b, back, 0))

    return make_step, ops.zeros_like(b)


def _scatter(weights, a):
    """The transpose of `_mix` in `b`: `sum_j (weights_j * a)[:, i + offsets[j]]`."""

    def make_step(slots):
        def step(n, total, padded_weights, padded):
            shift = slots.shift(n)
            column = slots.weights(padded_weights, n)  # (batch, length + reach, heads, 1)
            slot_weights = _window(column, shift, a.shape[1])  # (batch, length, heads, 1)
            view = _window(padded, shift, a.shape[1])  # a[:, i + offset]
            return total + slot_weights * view  # (weights_j * a)[:, i + o_j]

        # (batch, length + reach, heads, K) and (batch, length + reach, heads, dim)
        padded_weights = slots.columns(_padded(weights, 0, slots.reach))
        return step, (padded_weights, _padded(a, 0, slots.reach))

    return make_step, ops.zeros_like(a)


def _offset_logits(query, key, offsets):
    """The offset logits `_dots(query, key)` with a gradient that keeps no shifted copy.

    The gradients are themselves sums over offsets of shifted views
    (`dq = mix(g, key)`, `dk = scatter(g, query)`), so the backward pass,
    like the forward one, holds one key-sized accumulator per sum at a time.
    """
    length = query.shape[1]

    @ops.custom_gradient
    def logits(query, key):
        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return _offset_loops(offsets, length, _mix(upstream, key), _scatter(upstream, query))

        return _offset_loops(offsets, length, _dots(query, key, offsets))[0], grad

    return logits(query, key)


def _offset_context(weights, value, offsets):
    """The context `_mix(weights, value)` with a gradient that keeps no shifted copy."""
    length = value.shape[1]

    @ops.custom_gradient
    def context(weights, value):
        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            return _offset_loops(
                offsets,
                length,
                _dots(upstream, value, offsets),
                _scatter(weights, upstream),
            )

        return _offset_loops(offsets, length, _mix(weights, value))[0], grad

    return context(weights, value)


@functools.cache
def _xla_on_cpu():
    """Whether the backend compiles with XLA and has no accelerator."""
    if keras.backend.backend() not in ("jax", "tensorflow"):
        return False
    return all(device.startswith("cpu") for device in keras.distribution.list_devices())


def _query_blocks(length, block, causal):
    """`(start, end, keys)` per block of queries: queries `[start, end)` see keys `[0, keys)`."""
    for start in range(0, length, block):
        end = min(start + block, length)
        yield start, end, end if causal else length


class _KeyBlocks:
    """Keys and values cut into blocks of `size`, for loops that read one block at a time.

    Keys and values are zero-padded to a whole number of blocks; the
    padding, like the future under `"causal"`, is masked out of every
    block's logits.
    """

    def __init__(self, key, value, size, scale, causal):
        self.length, self.size, self.scale, self.causal = key.shape[1], size, scale, causal
        tail = -self.length % size
        self.key = _padded(key, 0, tail)  # (batch, blocks * size, heads, key_dim)
        self.value = _padded(value, 0, tail)  # (batch, blocks * size, heads, value_dim)

    def count(self, keys):
        """The number of blocks that hold keys `[0, keys)`."""
        return -(-keys // self.size)

    def start(self, n):
        return n * self.size

    def block(self, padded, n):
        """Block `n` of `padded` keys or values, `(batch, size, heads, dim)`."""
        return _window(padded, self.start(n), self.size)

    def logits(self, query_block, key, start, n):
        """Scaled float32 logits of queries `start...` on block `n` of `key`, `(b, h, q, size)`."""
        logits = ops.einsum("bqhd,bkhd->bhqk", query_block, self.block(key, n)) * self.scale
        rows = ops.arange(start, start + query_block.shape[1])[:, None]  # (q, 1)
        columns = ops.arange(0, self.size)[None, :] + self.start(n)  # (1, size)
        allowed = columns < self.length
        if self.causal:
            allowed = allowed & (rows >= columns)
        return ops.where(allowed, logits, MASKED_LOGIT)


def _blockwise(query, key, value, scale, causal, block, key_block):
    """`softmax(scale * Q K^T) V` per head, block by block, with a recomputing gradient.

    Each block of `block` queries loops over the blocks of `key_block` keys
    it may see with an online softmax (a running maximum, sum and output),
    so a step holds one `(block, key_block)` slice of the logits per head.
    Computed in float32 and returned in `value`'s dtype (the gradients in
    their inputs' dtypes).
    """
    dtypes = [x.dtype for x in (query, key, value)]

    @ops.custom_gradient
    def attend(query, key, value):
        query, key, value = (ops.cast(x, "float32") for x in (query, key, value))
        blocks = _KeyBlocks(key, value, key_block, scale, causal)
        outputs, log_sums = [], []
        for start, end, keys in _query_blocks(query.shape[1], block, causal):
            output, log_sum = _attend_block(query[:, start:end], start, blocks, keys)
            outputs.append(output)
            log_sums.append(log_sum)
        output = ops.concatenate(outputs, axis=1)  # (batch, length, heads, value_dim)
        log_sum = ops.concatenate(log_sums, axis=2)  # (batch, heads, length, 1)

        def grad(*args, upstream=None):
            upstream = args[0] if upstream is None else upstream
            grads = _blockwise_grads(
                query, blocks, output, log_sum, ops.cast(upstream, "float32"), block
            )
            return tuple(ops.cast(g, dtype) for g, dtype in zip(grads, dtypes, strict=True))

        return ops.cast(output, dtypes[2]), grad

    return attend(query, key, value)


def _attend_block(query_block, start, blocks, keys):
    """One block of queries over the key blocks holding keys `[0, keys)`, online softmax.

    Returns its output `(batch, q, heads, value_dim)` and its log-sum-exp
    `(batch, heads, q, 1)`.
    """

    def step(n, carry, held):
        query_block, key, value = held
        peak, total, output = carry
        logits = blocks.logits(query_block, key, start, n)  # (batch, heads, q, size)
        new_peak = ops.maximum(peak, ops.max(logits, axis=-1, keepdims=True))
        weights = ops.exp(logits - new_peak)
        decay = ops.exp(peak - new_peak)  # (batch, heads, q, 1)
        total = total * decay + ops.sum(weights, axis=-1, keepdims=True)
        values = blocks.block(value, n)  # (batch, size, heads, value_dim)
        update = ops.einsum("bhqk,bkhd->bqhd", weights, values)  # (batch, q, heads, value_dim)
        return new_peak, total, output * ops.transpose(decay, (0, 2, 1, 3)) + update

    # Zeros made from the queries, not from their shape: a symbolic batch
    # (an export's) cannot size `ops.full` in jax2onnx.
    column = ops.zeros_like(query_block[..., :1])  # (batch, q, heads, 1)
    row_statistic = ops.transpose(column, (0, 2, 1, 3))  # (batch, heads, q, 1)
    output = column + ops.zeros((blocks.value.shape[-1],), "float32")  # (batch, q, heads, v)
    initial = (row_statistic + MASKED_LOGIT, row_statistic, output)
    held = (query_block, blocks.key, blocks.value)
    peak, total, output = _loop(blocks.count(keys), step, initial, held)
    return output / ops.transpose(total, (0, 2, 1, 3)), peak + ops.log(total)


def _blockwise_grads(query, blocks, output, log_sum, upstream, block):
    """Gradients of `_blockwise` in query, key and value, each block's weights recomputed."""
    length = query.shape[1]
    # (batch, heads, length, 1): sum_d dO * O, the softmax's correction term.
    correction = ops.expand_dims(ops.transpose(ops.sum(upstream * output, axis=-1), (0, 2, 1)), -1)
    query_grads = []
    key_grad, value_grad = ops.zeros_like(blocks.key), ops.zeros_like(blocks.value)
    for start, end, keys in _query_blocks(length, block, blocks.causal):
        rows = slice(start, end)
        step = _gradient_step(
            query[:, rows],
            upstream[:, rows],
            log_sum[:, :, rows],
            correction[:, :, rows],
            start,
            blocks,
        )
        initial = (ops.zeros_like(query[:, rows]), key_grad, value_grad)
        query_grad, key_grad, value_grad = ops.fori_loop(0, blocks.count(keys), step, initial)
        query_grads.append(query_grad)
    unpadded = slice(0, blocks.length)
    return ops.concatenate(query_grads, axis=1), key_grad[:, unpadded], value_grad[:, unpadded]


def _gradient_step(query_block, upstream_block, log_sum, correction, start, blocks):
    """The loop step over key blocks of one query block's gradients."""

    def step(n, carry):
        query_grad, key_grad, value_grad = carry
        logits = blocks.logits(query_block, blocks.key, start, n)  # (batch, heads, q, k)
        weights = ops.exp(logits - log_sum)
        values = blocks.block(blocks.value, n)  # (batch, k, heads, value_dim)
        weight_grads = ops.einsum("bqhd,bkhd->bhqk", upstream_block, values)
        logit_grads = weights * (weight_grads - correction) * blocks.scale
        keys = blocks.block(blocks.key, n)  # (batch, k, heads, key_dim)
        query_grad = query_grad + ops.einsum("bhqk,bkhd->bqhd", logit_grads, keys)
        key_part = ops.einsum("bhqk,bqhd->bkhd", logit_grads, query_block)  # (batch, k, heads, d)
        value_part = ops.einsum("bhqk,bqhd->bkhd", weights, upstream_block)  # (batch, k, heads, v)
        key_grad = _add_to_block(key_grad, blocks, n, key_part)
        value_grad = _add_to_block(value_grad, blocks, n, value_part)
        return query_grad, key_grad, value_grad

    return step


def _add_to_block(total, blocks, n, part):
    """`total` with `part` added to key block `n` (in place under XLA)."""
    start = blocks.start(n)
    current = _window(total, start, blocks.size)
    return ops.slice_update(total, (0, start, 0, 0), current + part)
