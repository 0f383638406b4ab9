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
from keras_attn.kernels import (
    blockwise_attention,
    dense_attention,
    gather_positions,
    gathered_attention,
    has_native,
    offset_attention,
    runtime,
)
from keras_attn.kernels.blockwise import BLOCK_SIZE, KEY_BLOCK_SIZE
from keras_attn.kernels.dense import rows_with_keys
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
    sequence_positions,
    shape_checked_when_run,
    static_size,
)

LOGIT_SCALES = ("none", "log_length")
DENSE_PATTERNS = ("dense", "causal")
IMPLEMENTATIONS = ("auto", "reference")
# Length from which the dense patterns run `blockwise_attention` on XLA CPU.
# See `MultiHeadSelfAttention.blockwise_min_length`.
BLOCKWISE_MIN_LENGTH = 1024
# From this length, torch runs `offset_attention`'s reference rather than
# `gathered_attention` when its native implementation cannot run. See
# `MultiHeadSelfAttention.shifted_sparse_keys`.
TORCH_SHIFTED_MIN_LENGTH = 1024


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
            runs `keras_attn.kernels.offset_attention` (shifted views of the
            keys and values, one logit per offset, no per-slot copy of them
            in either pass); other patterns have their keys gathered
            (`gathered_attention`, `O(L K)` keys and values). The dense
            patterns run `dense_attention`: without attention scores and
            active dropout (and with `value_dim == key_dim`), the backend's
            fused kernel (flash or cuDNN on GPU; under float16 that step
            runs in float32), and from 1,024 positions on XLA CPU
            `blockwise_attention`.
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
            the fused kernels.
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
        implementation: `"auto"` (default) or `"reference"`, which
            implementation of each attention kernel runs (see
            `keras_attn.kernels`): `"auto"` runs a backend's native one
            where it has one (torch's `scaled_dot_product_attention` and
            fused offset loops, JAX's `jax.nn.dot_product_attention` and
            slot-major offset loops),
            `"reference"` the `keras.ops` one everywhere. Both compute the
            same outputs and gradients (to float rounding).
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
        implementation: str = "auto",
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
        self.implementation = check_choice("implementation", implementation, IMPLEMENTATIONS)
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
        context, scores = self._attend(
            query, key, value, mask, attention_mask, training, return_attention_scores
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
        positions = sequence_positions(length)  # (length,)
        seen = ops.expand_dims(positions, 1) >= positions  # (length, length)
        return ops.logical_and(full, seen)  # (batch, length, length)

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
        context, _ = self._attend(query, key, value, mask, None, training)
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
        context, _ = self._attend(query, key, value, mask, None, training)
        return self._output_dense(context)  # (batch, count, output_dim)

    def _attend(self, query, key, value, mask, attention_mask, training, scores=False):
        """`(context, scores)` of the projected queries, keys and values, through a kernel.

        The queries are the last `query.shape[1]` of the positions of the
        keys (all of them but in `attend_last_positions`); `scores=True`
        asks for the attention weights. float16 queries and keys become
        float32 (float16 overflows at 65504; bfloat16 has float32's range
        and keeps its dtype); the keys no query may read are hidden, and
        queries that see a position that is not finite get NaN outputs (see
        `_hide_keys`).
        """
        if keras.backend.standardize_dtype(query.dtype) == "float16":
            query, key = ops.cast(query, "float32"), ops.cast(key, "float32")
        slots = None
        if self.is_sparse:  # the pattern's slots, for the kernel and the hidden keys
            slots = self.attention_pattern.key_indices(ops.shape(key)[1])  # (length, K) each
        key, value, broken = self._hide_keys(key, value, mask, attention_mask, slots)
        if self.is_sparse:
            attention = functools.partial(self._sparse_attention, slots=slots)
        else:
            attention = functools.partial(self._dense_attention, scores=scores)
        context, scores = attention(query, key, value, mask, attention_mask, training)
        if broken is None:
            return context, scores
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

    def _hide_keys(self, key, value, mask, attention_mask, slots):
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
        miss a position that another one sees. `slots`, a sparse pattern's
        `key_indices`, or `None`.
        """
        visible = None if mask is None else ops.cast(mask, "bool")  # (batch, length)
        hides_keys = self.attention_pattern == "causal" or attention_mask is not None
        finite = None
        if hides_keys or (self.additive_mask is not None and visible is not None):
            finite = ops.logical_and(_finite_positions(key), _finite_positions(value))
        broken = None
        if hides_keys:
            unseen = _all_of(visible, ops.logical_not(finite))
            broken = self._rows_with_keys(unseen, attention_mask, slots)
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

    # The blockwise kernel of the dense patterns: `None` (the default) runs
    # it from `BLOCKWISE_MIN_LENGTH` keys on XLA CPU (JAX and TensorFlow
    # without an accelerator) and never elsewhere, where fused kernels do
    # better; an int runs it from that length on every backend.
    blockwise_min_length: int | None = None
    blockwise_block_size: int = BLOCK_SIZE
    blockwise_key_block_size: int = KEY_BLOCK_SIZE

    def _runs_blockwise(self, query, key, mask, attention_mask, training, scores):
        """Whether the dense step runs `blockwise_attention`."""
        threshold = self.blockwise_min_length
        if threshold is None and _xla_on_cpu():
            threshold = BLOCKWISE_MIN_LENGTH
        length = static_size(key.shape[1])
        if threshold is None or length is None or length < threshold:
            return False
        plain = mask is None and attention_mask is None and self.additive_mask is None
        every_query = query.shape[1] == length
        return plain and every_query and not scores and not (self.dropout > 0 and bool(training))

    def _dense_attention(self, query, key, value, mask, attention_mask, training, scores):
        """The dense kernel of the call: blockwise, or `dense_attention` (fused or explicit)."""
        causal = self.attention_pattern == "causal"
        length = ops.shape(key)[1]
        if self._runs_blockwise(query, key, mask, attention_mask, training, scores):
            scale = self.query_key_scale
            if self.logit_scale == "log_length":
                scale *= math.log(key.shape[1])  # no mask: every position counts
            context = blockwise_attention(
                query,
                key,
                value,
                scale=scale,
                causal=causal,
                block_size=self.blockwise_block_size,
                key_block_size=self.blockwise_key_block_size,
            )
            return context, None
        allowed = _allowed_keys(mask, attention_mask)  # (batch, 1 or length, length)
        if allowed is not None:
            allowed = ops.expand_dims(allowed, 1)  # (batch, 1, 1 or length, length)
        if attention_mask is not None:  # the rows of the queries
            allowed = allowed[:, :, -ops.shape(query)[1] :]
        return dense_attention(
            query,
            key,
            value,
            allowed,
            scale=self.query_key_scale,
            causal=causal,
            logit_scale=self._logit_scale(length, mask),
            additive_mask=self.additive_mask,
            dropout=self._weights_dropout(training),
            return_weights=scores,
            implementation=self.implementation,
        )

    def _sparse_attention(self, query, key, value, mask, attention_mask, training, slots):
        """The sparse kernel of the call: `offset_attention` or `gathered_attention`."""
        length = ops.shape(query)[1]
        indices, valid = slots
        options = {
            "scale": self.query_key_scale,
            "logit_scale": self._logit_scale(length, mask),
            "dropout": self._weights_dropout(training),
        }
        offsets = self.attention_pattern.static_offsets(length)
        if offsets is None or not self._shifts_sparse_keys(length):
            allowed = _slot_allowed(indices, valid, mask, attention_mask)  # (b or 1, 1, L, K)
            return gathered_attention(query, key, value, indices, allowed, **options)
        # The kernel leaves out the slots before position 0 (`valid`) itself.
        allowed = _slot_allowed(indices, None, mask, attention_mask)  # (b or 1, 1, L, K) or None
        return offset_attention(
            query, key, value, offsets, allowed, implementation=self.implementation, **options
        )

    # How a pattern of fixed offsets is computed: `None` (the default) runs
    # `offset_attention` on JAX and TensorFlow, on torch where its native
    # implementation runs (`implementation="auto"`, not while tracing), and
    # otherwise on torch from `TORCH_SHIFTED_MIN_LENGTH` positions: below it,
    # the eager reference loop costs more in kernel launches than gathering
    # K copies of the keys and values (benchmarks/attention_speed.py). A bool
    # forces `offset_attention` (`True`) or `gathered_attention` (`False`).
    shifted_sparse_keys: bool | None = None

    def _shifts_sparse_keys(self, length):
        if self.shifted_sparse_keys is not None:
            return self.shifted_sparse_keys
        if keras.backend.backend() != "torch":
            return True
        if self.implementation == "auto" and has_native("offset_attention"):
            return True
        size = static_size(length)
        return size is not None and size >= TORCH_SHIFTED_MIN_LENGTH

    def _rows_with_keys(self, mask, attention_mask, slots):
        """Boolean `(batch, length)` (or `(batch, 1)`): queries with a visible key.

        `slots`, the pattern's `key_indices` for a sparse pattern (which reads
        an `attention_mask` at them only), or `None`.
        """
        if attention_mask is not None and slots is not None:
            allowed = _slot_allowed(*slots, mask, attention_mask)  # (batch, 1, length, K)
            return ops.squeeze(ops.any(allowed, axis=-1), axis=1)  # (batch, length)
        allowed = _allowed_keys(mask, attention_mask)  # (batch, 1 or length, length)
        if allowed is None:
            return None  # every query sees itself, or every key
        causal = self.attention_pattern == "causal"
        return rows_with_keys(ops.expand_dims(allowed, 1), causal, ops.shape(allowed)[-1])

    @property
    def query_key_scale(self):
        """The factor of the query-key dot products: `qk_scale` or `1 / sqrt(key_dim)`."""
        return self.qk_scale if self.qk_scale is not None else 1.0 / math.sqrt(self.key_dim)

    def _logit_scale(self, length, mask):
        """The log-length scale of the logits, `(batch or 1, 1, 1, 1)`, or `None`."""
        if self.logit_scale == "none":
            return None
        return self._log_length(length, mask)

    def _weights_dropout(self, training):
        """The dropout of the attention weights, or `None` when it is not active.

        For the last positions of a sequence, masks are drawn for the weights
        computed only: the same distribution as the whole sequence's.
        """
        if not (self.dropout > 0 and training):
            return None
        return functools.partial(
            runtime.dropout, rate=self.dropout, seed_generator=self._dropout_layer.seed_generator
        )

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
            "implementation",
        )
        return {**super().get_config(), **argument_config(self, arguments)}


def _slot_allowed(indices, valid, mask, attention_mask=None):
    """Boolean `(batch or 1, 1, length, K)`: the key slots that `valid` uses and no mask hides.

    `valid`, boolean `(length, K)` or `None` (every slot); `mask` masks
    keys, `(batch, length)`; `attention_mask`, `(batch, length, length)`, is
    read at each query's slot keys. `None` when none of the three is given.
    """
    allowed = []
    if valid is not None:
        allowed.append(ops.expand_dims(ops.cast(valid, "bool"), 0))  # (1, length, K)
    if mask is not None:
        allowed.append(_lookup(mask, indices))  # (batch, length, K)
    if attention_mask is not None:
        length = ops.shape(indices)[0]
        rows = ops.expand_dims(sequence_positions(length, indices.dtype), 1)  # (length, 1)
        # (batch, length * length): query i's row of keys from entry i * length.
        flat = ops.reshape(attention_mask, (ops.shape(attention_mask)[0], -1))
        allowed.append(_lookup(flat, rows * length + indices))  # (batch, length, K)
    allowed = _all_of(*allowed)
    return None if allowed is None else ops.expand_dims(allowed, 1)


def _lookup(values, entries):
    """Boolean `values[:, entries]` of a `(batch, n)` mask, `(batch, length, K)`.

    A row lookup through `gather_positions`, which exports to ONNX from
    torch (`take` on axis 1 does not).
    """
    as_positions = ops.expand_dims(ops.cast(values, "int32"), (2, 3))  # (batch, n, 1, 1)
    picked = gather_positions(as_positions, entries)[..., 0, 0]  # (length, K, batch)
    return ops.transpose(picked, (2, 0, 1)) > 0  # (batch, length, K)


def _without_keras_mask(inputs):
    """`inputs` as a new tensor without a Keras mask attached.

    The layer handles the mask itself, so its projections must not warn that
    they drop it.
    """
    return ops.add(inputs, ops.zeros((), inputs.dtype))


def _allowed_keys(mask, attention_mask):
    """Boolean `(batch, 1 or length, length)`: whether query `i` may see key `j`, or `None`.

    The logical and of the padding `mask` (on the keys) and `attention_mask`,
    of those given; `None` when every key is visible. Boolean masks gain axes
    with `expand_dims`: indexing with `None` becomes a strided slice that the
    TFLite converter keeps as a TensorFlow op.
    """
    allowed = []
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

    Keras' TensorFlow `ops.add(x1, x2)` turns an `x2` with one axis of size
    above 1 into `tf.nn.bias_add`, which adds it along axis 1 of `x1` when
    that axis has its size and the last one does not: a `(num_heads, 1)`
    bias (heads of size 1) went along the length axis when
    `length == num_heads`. `keras.layers.MultiHeadAttention` has the same
    error. So the bias comes first, with `x`'s rank (leading axes of size
    1): then only an `x` of one axis above size 1 takes `bias_add`, along
    the bias's last axis, which is that axis (a `(1, 1, 1, key_dim)` query
    of one token and one head; a bias of lower rank gave a tensor of the
    bias's shape there).
    """
    bias = ops.reshape(bias, (1,) * (len(x.shape) - len(bias.shape)) + tuple(bias.shape))
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


@functools.cache
def _xla_on_cpu():
    """Whether the backend compiles with XLA and has no accelerator."""
    if keras.backend.backend() not in ("jax", "tensorflow"):
        return False
    return all(device.startswith("cpu") for device in keras.distribution.list_devices())
