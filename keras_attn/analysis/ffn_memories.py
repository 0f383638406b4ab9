"""Feed-forward layers as key-value memories (Geva et al., EMNLP 2021).

A transformer feed-forward layer `FF(x) = f(x K + b) V + c` is read as a
memory: the columns of the first kernel `K` are keys, the rows of the
second kernel `V` are values and `m = f(x K + b)` are the memory
coefficients. This module extracts keys and values from any Keras model
whose feed-forward layers are two `Dense` layers, streams a corpus through
the model batch by batch (memory stays bounded by the top-k tables) and
computes the paper's statistics: the top-k trigger prefixes of every key,
the value-to-vocabulary projection and its agreement with the triggers'
next tokens (against a shuffled-key null), the rank of that next token in
the value's distribution, the fraction of active memories, how often a
layer's prediction matches none of its memories', and whether the residual
or the feed-forward output decides the layer's top prediction. Every rate
comes with a 95% bootstrap interval.

Reference: Geva, Schuster, Berant, Levy. "Transformer Feed-Forward Layers
Are Key-Value Memories". EMNLP 2021. https://arxiv.org/abs/2012.14913
"""

import dataclasses
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.interop.model_layers import find_feed_forward_layers, record_calls
from keras_attn.utils.numpy_math import softmax
from keras_attn.utils.validation import check_int

# Per-position statistics, in the order of the per-example count arrays.
POSITION_STATISTICS = (
    "active_fraction",
    "zero_agreement_rate",
    "memory_sum_zero_agreement_rate",
    "residual_kept",
    "ffn_override",
    "compromise",
)


@dataclasses.dataclass(frozen=True)
class FeedForwardSite:
    """One feed-forward layer of a model, seen as key-value memories.

    Args:
        hidden: the first `Dense` layer. Its output (after its activation)
            is the memory coefficients; its kernel's columns are the keys.
        output: the second `Dense` layer; its kernel's rows are the values.
        residual: optional layer whose input is the residual stream before
            the feed-forward layer (the pre-norm of a pre-norm block). With
            `None`, the input of `hidden` is used (post-norm blocks).
        name: label used in reports.

    Example:

    ```python
    hidden, output = keras.layers.Dense(8, "relu"), keras.layers.Dense(4)
    model = keras.Sequential([keras.Input((4,)), hidden, output])
    site = FeedForwardSite(hidden, output)
    site.keys.shape, site.values.shape  # ((8, 4), (8, 4))
    ```
    """

    hidden: keras.layers.Layer
    output: keras.layers.Layer
    residual: keras.layers.Layer | None = None
    name: str = ""

    @property
    def keys(self):
        """`(num_memories, dim)` array: row `i` is key `k_i`."""
        return keras.ops.convert_to_numpy(self.hidden.kernel).T

    @property
    def values(self):
        """`(num_memories, dim)` array: row `i` is value `v_i`."""
        return keras.ops.convert_to_numpy(self.output.kernel)


def transformer_block_sites(model: keras.layers.Layer) -> list[FeedForwardSite]:
    """The feed-forward layers of every transformer block in `model`, in order.

    The blocks are the ones `keras_attn.interop.find_feed_forward_layers`
    recognises: keras_attn's `TransformerBlock`, KerasHub's
    `TransformerEncoder` and `TransformerDecoder` (the blocks of
    `BertBackbone`, `GPT2Backbone` and many more) and the encoder block of
    KerasHub's `ViTBackbone`, in the order the model runs them, also when
    they are nested in other models or layers. The residual of a pre-norm
    block is the input of its feed-forward layer norm.

    Args:
        model: a built Keras model containing transformer blocks.

    Returns:
        list of `FeedForwardSite`, one per block, each named by the block's
        path in `find_layers` (its name when it is a top-level layer).

    Raises:
        ValueError: if `model` holds none of these blocks; list the
            feed-forward layers of other blocks as `FeedForwardSite`s.

    Example:

    ```python
    sites = transformer_block_sites(build_decoder_language_model(100, 16, num_layers=2))
    [site.name for site in sites]  # ['block_0', 'block_1']
    sites = transformer_block_sites(keras_hub.models.GPT2Backbone.from_preset("gpt2_base_en"))
    [site.name for site in sites][:2]  # ['transformer_layer_0', 'transformer_layer_1']
    ```
    """
    blocks = find_feed_forward_layers(model)
    if not blocks:
        raise ValueError(
            "`model` contains no transformer block that `find_feed_forward_layers` knows "
            "(keras_attn's TransformerBlock, KerasHub's TransformerEncoder, TransformerDecoder "
            "and ViT encoder block). For another block, give its two Dense layers as "
            "`FeedForwardSite(first_dense, second_dense, residual=pre_norm_or_None)`. "
            f"Received: model={model.name!r}"
        )
    return [
        FeedForwardSite(layers.hidden, layers.output, residual=layers.norm, name=path)
        for path, layers in blocks.items()
    ]


def value_top_tokens(site: FeedForwardSite, output_embedding: Tensor) -> np.ndarray:
    """The top token of each value's vocabulary distribution `softmax(v_i E)`.

    Args:
        site: a `FeedForwardSite`.
        output_embedding: `(dim, vocabulary_size)` array `E`.

    Returns:
        `(num_memories,)` int array of token ids.
    """
    return np.argmax(site.values @ np.asarray(output_embedding), axis=-1)


def value_vocabulary_distributions(site: FeedForwardSite, output_embedding: Tensor) -> np.ndarray:
    """`p_i = softmax(v_i E)` for every value, `(num_memories, vocabulary_size)`."""
    return softmax(site.values @ np.asarray(output_embedding))  # (memories, vocabulary)


def _run_sites(model, inputs, sites):
    """Runs `model` on one batch; per site `(residual, coefficients, ffn_output)` numpy."""
    watched = [
        layer
        for site in sites
        for layer in (site.hidden, site.output, site.residual)
        if layer is not None
    ]
    with record_calls(watched, compiled_calls=False) as records:  # a direct call only
        model(inputs, training=False)
    results = []
    for site in sites:
        hidden_input, coefficients = records[site.hidden][-1]
        _, ffn_output = records[site.output][-1]
        residual = records[site.residual][-1][0] if site.residual is not None else hidden_input
        results.append(
            tuple(keras.ops.convert_to_numpy(t) for t in (residual, coefficients, ffn_output))
        )
    return results


def memory_coefficients(
    model: keras.Model, inputs: Any, sites: Sequence[FeedForwardSite] | None = None
) -> list[np.ndarray]:
    """Memory coefficients `m = f(x K + b)` of every site for one batch.

    Args:
        model: a Keras model; it is called eagerly on `inputs`.
        inputs: one batch of model inputs.
        sites: list of `FeedForwardSite`; by default those of
            `transformer_block_sites(model)`, every transformer block.

    Returns:
        list of `(batch, length, num_memories)` numpy arrays, one per site.
    """
    sites = transformer_block_sites(model) if sites is None else sites
    return [coefficients for _, coefficients, _ in _run_sites(model, inputs, sites)]


@dataclasses.dataclass
class MemoryAnalysis:
    """Per-layer results of `analyze_memories`.

    Lists hold one entry per site. Trigger tables are `(num_memories, top_k)`
    and sorted by decreasing coefficient; a slot that never got a valid
    position has score `-inf` and example `-1`.

    Attributes:
        site_names: list of site names.
        trigger_scores: lists of the top coefficients of each key.
        trigger_examples: global index of the example (sequence) of each trigger.
        trigger_positions: position in that example where the prefix ends.
        trigger_next_tokens: the token that follows each trigger prefix.
        value_top_tokens: `(num_memories,)` top token of each value.
        agreement_rate: `(layers,)` share of keys whose value's top token is
            the next token of the key's top trigger.
        shuffled_agreement_rate: `(layers,)` the same with the keys'
            triggers randomly permuted within the layer (the null), mean
            over `permutations` permutations.
        agreement_p_value: `(layers,)` share of permutations (one added to
            both counts) whose agreement is at least the observed one.
        next_token_rank: `(layers,)` median over keys of the rank (0 = top)
            of the top trigger's next token in the value's distribution.
        shuffled_next_token_rank: `(layers,)` the same under the permuted
            triggers, mean over permutations.
        random_baseline: float, `1 / vocabulary_size`.
        active_fraction: `(layers,)` mean share of memories with `m_i > 0`.
        zero_agreement_rate: `(layers,)` share of all valid positions where
            the top token of the layer output (residual + feed-forward
            output, through `readout`) is the top token of no memory
            `m_i v_i` projected with `E` (a memory with `m_i = 0` has no top
            token, one with `m_i < 0` the value's bottom token). The official
            code's rate is `official_zero_agreement_rate`.
        memory_sum_zero_agreement_rate: `(layers,)` share of positions where
            the top token of the memory sum `sum_i m_i v_i` (projected with
            `E`, like the values) is the top token of no active memory.
        residual_kept: `(layers,)` share of positions where the top token of
            the layer output (residual + feed-forward output, through
            `readout`) equals the residual's.
        ffn_override: `(layers,)` share where it equals the feed-forward
            output's and not the residual's.
        compromise: `(layers,)` share where it equals neither.
        trigger_tokens: the token at each trigger's position, the last token
            of its prefix (`-1` at position 0, whose token the batches do not
            give).
        trigger_target_counts: `(num_memories,)` per key, how many of its
            top-k triggers have the value's top token as their target, the
            official code's count (`-1` for a key with no trigger). The
            official code reads the target as `record_tokens[-2]` of a
            prefix that runs one token past the trigger position (its
            positions count a beginning-of-sentence token that its text
            lacks): the token at the trigger position, `trigger_tokens`.
        official_agreement_rate: `(layers,)` share of the keys with a trigger
            whose count in `trigger_target_counts` is at least one.
        official_zero_agreement_rate: `(layers,)` the official zero-agreement
            rate: at one position sampled per sequence, the share of
            sequences where the top token of the layer output is the top
            token of no memory `m_i v_i`, with `m_i = max(m_i, 0)` (an
            inactive memory, `m_i v_i = 0`, takes the top token of a zero
            hidden state) and memories and layer output projected through the
            same head (`readout`, or `E`).
        intervals: dict from each statistic's name to a `(layers, 2)` 95%
            interval: a bootstrap over keys (agreement, rank) or over
            examples (the per-position rates); for the shuffled statistics,
            the 2.5 and 97.5 percentiles of the permutations.
        num_examples: int, sequences seen.
        num_positions: int, valid positions seen.
    """

    site_names: list
    trigger_scores: list
    trigger_examples: list
    trigger_positions: list
    trigger_next_tokens: list
    value_top_tokens: list
    agreement_rate: np.ndarray
    shuffled_agreement_rate: np.ndarray
    agreement_p_value: np.ndarray
    next_token_rank: np.ndarray
    shuffled_next_token_rank: np.ndarray
    random_baseline: float
    active_fraction: np.ndarray
    zero_agreement_rate: np.ndarray
    memory_sum_zero_agreement_rate: np.ndarray
    residual_kept: np.ndarray
    ffn_override: np.ndarray
    compromise: np.ndarray
    trigger_tokens: list
    trigger_target_counts: list
    official_agreement_rate: np.ndarray
    official_zero_agreement_rate: np.ndarray
    intervals: dict
    num_examples: int
    num_positions: int

    def trigger_prefixes(
        self, layer: int, key: int, sequences: Sequence[Sequence[Any]] | np.ndarray
    ) -> list[tuple[Sequence[Any], int, float]]:
        """The top trigger prefixes of one key, best first.

        Args:
            layer: int, site index.
            key: int, memory index.
            sequences: indexable by the global example index (the batches'
                examples in order), each a sequence of tokens.

        Returns:
            list of `(prefix, next_token, score)`; `prefix` is
            `sequences[example][: position + 1]`.
        """
        rows = zip(
            self.trigger_examples[layer][key],
            self.trigger_positions[layer][key],
            self.trigger_next_tokens[layer][key],
            self.trigger_scores[layer][key],
            strict=True,
        )
        return [
            (sequences[example][: position + 1], int(token), float(score))
            for example, position, token, score in rows
            if example >= 0
        ]

    def summary(self) -> dict[str, Any]:
        """JSON-friendly dict of the per-layer statistics and their intervals."""
        return {
            "layers": list(self.site_names),
            **{name: getattr(self, name).tolist() for name in SUMMARY_STATISTICS},
            "random_baseline": self.random_baseline,
            "intervals": {name: value.tolist() for name, value in self.intervals.items()},
            "num_examples": self.num_examples,
            "num_positions": self.num_positions,
        }


SUMMARY_STATISTICS = (
    "agreement_rate",
    "shuffled_agreement_rate",
    "agreement_p_value",
    "next_token_rank",
    "shuffled_next_token_rank",
    *POSITION_STATISTICS,
    "official_agreement_rate",
    "official_zero_agreement_rate",
)


class _TopK:
    """Running per-key top-k of `(score, example, position, next token)`."""

    def __init__(self, num_keys, k):
        self.scores = np.full((num_keys, k), -np.inf)
        self.examples = np.full((num_keys, k), -1, dtype=np.int64)
        self.positions = np.full((num_keys, k), -1, dtype=np.int64)
        self.next_tokens = np.full((num_keys, k), -1, dtype=np.int64)
        self.tokens = np.full((num_keys, k), -1, dtype=np.int64)

    def update(self, coefficients, valid, next_tokens, first_example):
        """Adds one batch: coefficients `(batch, length, keys)`."""
        masked = np.where(valid[..., None], coefficients, -np.inf)  # (batch, length, keys)
        positions = masked.argmax(axis=1)  # (batch, keys)
        scores = np.take_along_axis(masked, positions[:, None], axis=1)[:, 0]  # (batch, keys)
        batch = np.arange(coefficients.shape[0])[:, None]
        candidates = (
            (self.scores, scores.T),
            (self.examples, np.broadcast_to(first_example + batch, scores.shape).T),
            (self.positions, positions.T),
            (self.next_tokens, next_tokens[batch, positions].T),
            (self.tokens, _current_tokens(next_tokens)[batch, positions].T),
        )
        merged = [np.concatenate(pair, axis=1) for pair in candidates]  # (keys, k + batch)
        # Stable sort: among equal scores the earlier example wins.
        order = np.argsort(-merged[0], axis=1, kind="stable")[:, : self.scores.shape[1]]
        self.scores, self.examples, self.positions, self.next_tokens, self.tokens = (
            np.take_along_axis(table, order, axis=1) for table in merged
        )
        self.examples = np.where(np.isfinite(self.scores), self.examples, -1)


def _current_tokens(next_tokens):
    """The token at each position: the previous position's next token (`-1` at 0)."""
    start = np.full((len(next_tokens), 1), -1, dtype=np.int64)
    return np.concatenate([start, next_tokens[:, :-1]], axis=1)  # (batch, length)


def _split_batch(batch):
    if not isinstance(batch, (tuple, list)) or len(batch) not in (2, 3):
        raise ValueError(
            "Each batch must be `(inputs, next_tokens)` or `(inputs, next_tokens, valid)`. "
            f"Received: batch of type {type(batch).__name__}"
        )
    inputs, next_tokens = batch[0], np.asarray(batch[1])
    valid = np.asarray(batch[2], bool) if len(batch) == 3 else np.ones(next_tokens.shape, bool)
    return inputs, next_tokens, valid


def analyze_memories(
    model: keras.Model,
    batches: Iterable[tuple[Any, Tensor] | tuple[Any, Tensor, Tensor]],
    output_embedding: Tensor,
    sites: Sequence[FeedForwardSite] | None = None,
    top_k: int = 25,
    readout: Callable[[Tensor], Tensor] | None = None,
    seed: int = 0,
    permutations: int = 200,
    resamples: int = 1000,
) -> MemoryAnalysis:
    """Streams a corpus through `model` and computes the key-value memory statistics.

    Only the per-key top-k tables and per-example counts of the position
    statistics (six numbers per layer and sequence, for the bootstrap) are
    kept, so memory grows only with the number of sequences.

    Args:
        model: a Keras model, called eagerly on each batch's inputs.
        batches: iterable of `(inputs, next_tokens)` or
            `(inputs, next_tokens, valid)`: `next_tokens` is `(batch, length)`,
            the token that follows each position; `valid` is a boolean
            `(batch, length)` array of the positions to use (padding off).
        output_embedding: `(dim, vocabulary_size)` array `E` used to project
            values (`softmax(v_i E)`) and hidden states to the vocabulary.
        sites: list of `FeedForwardSite`; by default those of
            `transformer_block_sites(model)`, every transformer block.
        top_k: int, trigger examples kept per key.
        readout: optional callable from `(n, dim)` hidden states to
            `(n, vocabulary_size)` logits for the layer-level statistics
            (for example the final layer norm followed by `E`). Defaults to
            `h @ E`. Values and memories are always projected with `E` alone.
        seed: int, seed of the permutations and the bootstrap.
        permutations: int, permutations of the shuffled-key null.
        resamples: int, bootstrap resamples of the 95% intervals.

    Returns:
        A `MemoryAnalysis`.

    Example:

    ```python
    analysis = analyze_memories(model, [(tokens, next_tokens)], embedding, top_k=5)
    analysis.agreement_rate, analysis.intervals["agreement_rate"]
    ```
    """
    top_k = check_int("top_k", top_k)
    permutations = check_int("permutations", permutations)
    resamples = check_int("resamples", resamples)
    sites = transformer_block_sites(model) if sites is None else list(sites)
    embedding = np.asarray(output_embedding)
    value_logits = [site.values @ embedding for site in sites]  # (memories, vocabulary) each
    memories = [
        (site.values, _output_bias(site), np.argmax(logits, -1), np.argmin(logits, -1))
        for site, logits in zip(sites, value_logits, strict=True)
    ]
    tables = [_TopK(site.keys.shape[0], top_k) for site in sites]
    counts, lengths = [], []  # per batch: (batch, layers, statistics), (batch,)
    sampled_zero = []  # per batch: (sampled examples, layers)
    sample_rng = np.random.default_rng([seed, 1])
    num_examples = 0
    for batch in batches:
        inputs, next_tokens, valid = _split_batch(batch)
        batch_counts = np.zeros((len(next_tokens), len(sites), len(POSITION_STATISTICS)))
        examples, positions = _sampled_positions(valid, sample_rng)
        batch_zero = np.zeros((len(examples), len(sites)))
        for index, (residual, coefficients, ffn_output) in enumerate(
            _run_sites(model, inputs, sites)
        ):
            tables[index].update(coefficients, valid, next_tokens, num_examples)
            statistics = _position_statistics(
                residual[valid],
                coefficients[valid],
                ffn_output[valid],
                (*memories[index], embedding),
                readout,
            )  # (valid positions, statistics)
            np.add.at(batch_counts[:, index], np.nonzero(valid)[0], statistics)
            batch_zero[:, index] = _official_zero_agreement(
                residual[examples, positions],
                coefficients[examples, positions],
                ffn_output[examples, positions],
                sites[index].values,
                embedding,
                readout,
            )
        sampled_zero.append(batch_zero)
        counts.append(batch_counts)
        lengths.append(valid.sum(axis=1))
        num_examples += len(next_tokens)
    rng = np.random.default_rng(seed)
    counts = (
        np.concatenate(counts) if counts else np.zeros((0, len(sites), len(POSITION_STATISTICS)))
    )
    lengths = np.concatenate(lengths) if lengths else np.zeros(0)
    rates = counts.sum(axis=0) / max(lengths.sum(), 1)  # (layers, statistics)
    intervals = dict(
        zip(
            POSITION_STATISTICS,
            np.moveaxis(_bootstrap_ratio(counts, lengths, rng, resamples), 1, 0),
            strict=True,
        )
    )
    keys = _key_statistics(tables, value_logits, rng, permutations, resamples)
    intervals.update(keys.pop("intervals"))
    target_counts = [
        _trigger_target_counts(table, tops)
        for table, (_, _, tops, _) in zip(tables, memories, strict=True)
    ]
    sampled_zero = np.concatenate(sampled_zero) if sampled_zero else np.zeros((0, len(sites)))
    agreeing = [c[c >= 0] > 0 for c in target_counts]  # per layer, per key with a trigger
    intervals["official_agreement_rate"] = np.array(
        [_bootstrap_mean(flags, rng, resamples) for flags in agreeing]
    ).reshape(-1, 2)
    intervals["official_zero_agreement_rate"] = np.array(
        [_bootstrap_mean(flags, rng, resamples) for flags in sampled_zero.T]
    ).reshape(-1, 2)
    return MemoryAnalysis(
        site_names=[site.name for site in sites],
        trigger_scores=[t.scores for t in tables],
        trigger_examples=[t.examples for t in tables],
        trigger_positions=[t.positions for t in tables],
        trigger_next_tokens=[t.next_tokens for t in tables],
        value_top_tokens=[tops for _, _, tops, _ in memories],
        random_baseline=1.0 / embedding.shape[-1],
        **keys,
        **{name: rates[:, i] for i, name in enumerate(POSITION_STATISTICS)},
        intervals=intervals,
        num_examples=num_examples,
        num_positions=int(lengths.sum()),
        trigger_tokens=[t.tokens for t in tables],
        trigger_target_counts=target_counts,
        official_agreement_rate=np.array([_share(flags) for flags in agreeing]),
        official_zero_agreement_rate=np.array([_share(flags) for flags in sampled_zero.T]),
    )


def _share(flags):
    """The mean of a boolean or 0/1 array, 0 when it is empty."""
    return float(np.mean(flags)) if len(flags) else 0.0


def _bootstrap_mean(flags, rng, resamples):
    """The 95% bootstrap interval of the mean of `flags` (`(0, 0)` when empty)."""
    if len(flags) == 0:
        return np.zeros(2)
    means = np.asarray(flags, float)[rng.integers(0, len(flags), (resamples, len(flags)))]
    return np.percentile(means.mean(axis=1), [2.5, 97.5])


def _trigger_target_counts(table, value_tops):
    """Per key, how many of its triggers' tokens are the value's top token (`-1`: none)."""
    counts = np.sum((table.tokens == value_tops[:, None]) & (table.examples >= 0), axis=1)
    return np.where(table.examples[:, 0] >= 0, counts, -1)


def _sampled_positions(valid, rng):
    """`(examples, positions)`: one valid position drawn per example that has one."""
    examples = np.flatnonzero(valid.any(axis=1))
    positions = np.array(
        [rng.choice(np.flatnonzero(valid[example])) for example in examples], dtype=np.int64
    )
    return examples, positions


def _official_zero_agreement(residual, coefficients, ffn_output, values, embedding, readout):
    """Per sampled position, 1.0 where no memory's top token is the layer output's.

    The memories `max(m_i, 0) v_i` and the layer output `residual + ffn_output`
    go through the same head: `readout`, or `E`.
    """
    head = (lambda h: h @ embedding) if readout is None else readout
    output_top = np.argmax(keras.ops.convert_to_numpy(head(residual + ffn_output)), axis=-1)
    zero = np.ones(len(coefficients))
    for row, memory in enumerate(np.maximum(coefficients, 0.0)):
        memories = memory[:, None] * values  # (memories, dim): m_i v_i
        tops = np.argmax(keras.ops.convert_to_numpy(head(memories)), axis=-1)
        zero[row] = float(not np.any(tops == output_top[row]))
    return zero


def _position_statistics(residual, coefficients, ffn_output, site_data, readout):
    """Per valid position (row), the values of `POSITION_STATISTICS`."""
    values, bias, value_tops, value_bottoms, embedding = site_data
    if len(coefficients) == 0:
        return np.zeros((0, len(POSITION_STATISTICS)))
    active = coefficients > 0  # (positions, memories)
    if readout is None:  # Linear readout: reuse the projections.
        residual_logits = residual @ embedding  # (positions, vocabulary)
        ffn_logits = ffn_output @ embedding
        output_logits = residual_logits + ffn_logits
        memory_logits = ffn_logits - bias @ embedding  # (sum_i m_i v_i) E
    else:
        residual_logits, ffn_logits, output_logits = (
            keras.ops.convert_to_numpy(readout(h))
            for h in (residual, ffn_output, residual + ffn_output)
        )
        memory_logits = (coefficients @ values) @ embedding
    residual_top, ffn_top, output_top, memory_top = (
        np.argmax(logits, axis=-1)
        for logits in (residual_logits, ffn_logits, output_logits, memory_logits)
    )
    # The top token of m_i v_i E: the value's top token if m_i > 0, its bottom if m_i < 0.
    matches_output = (active & (value_tops[None] == output_top[:, None])) | (
        (coefficients < 0) & (value_bottoms[None] == output_top[:, None])
    )  # (positions, memories)
    matches_sum = active & (value_tops[None] == memory_top[:, None])
    kept = output_top == residual_top
    override = ~kept & (output_top == ffn_top)
    columns = (
        active.mean(axis=1),
        ~matches_output.any(axis=1),
        ~matches_sum.any(axis=1),
        kept,
        override,
        ~kept & ~override,
    )
    return np.stack(columns, axis=-1).astype(float)  # (positions, statistics)


def _output_bias(site):
    """The second layer's bias, or zeros: `FF(x) = sum_i m_i v_i + bias`."""
    bias = getattr(site.output, "bias", None)
    if bias is None:
        return np.zeros(site.values.shape[1], np.float32)
    return keras.ops.convert_to_numpy(bias)


def _bootstrap_ratio(numerators, denominators, rng, resamples, chunk=100):
    """95% interval of `sum(numerators) / sum(denominators)` over resampled units.

    Args:
        numerators: `(units, ...)` array.
        denominators: `(units,)` array.

    Returns:
        `(..., 2)` array of the 2.5 and 97.5 percentiles.
    """
    units = len(denominators)
    if units == 0:
        return np.zeros((*numerators.shape[1:], 2))
    flat = numerators.reshape(units, -1)  # (units, statistics)
    estimates = []
    for start in range(0, resamples, chunk):
        weights = rng.multinomial(
            units, np.full(units, 1.0 / units), size=min(chunk, resamples - start)
        )
        totals = np.maximum(weights @ denominators, 1e-12)  # (rows,)
        estimates.append((weights @ flat) / totals[:, None])  # (rows, statistics)
    interval = np.percentile(np.concatenate(estimates), [2.5, 97.5], axis=0)  # (2, statistics)
    return np.moveaxis(interval, 0, -1).reshape(*numerators.shape[1:], 2)


KEY_STATISTICS = (
    "agreement_rate",
    "shuffled_agreement_rate",
    "agreement_p_value",
    "next_token_rank",
    "shuffled_next_token_rank",
)


def _key_statistics(tables, value_logits, rng, permutations, resamples):
    """Per layer: agreement, next-token rank, the shuffled null and their intervals."""
    layers = [
        _layer_key_statistics(table, logits, rng, permutations, resamples)
        for table, logits in zip(tables, value_logits, strict=True)
    ]
    statistics = {name: np.array([s[name] for s, _ in layers], float) for name in KEY_STATISTICS}
    statistics["intervals"] = {
        name: np.array([i[name] for _, i in layers], float).reshape(-1, 2)
        for name in KEY_STATISTICS
        if name != "agreement_p_value"
    }
    return statistics


def _layer_key_statistics(table, logits, rng, permutations, resamples):
    keys = np.flatnonzero(table.examples[:, 0] >= 0)  # keys with a trigger
    if len(keys) == 0:
        return dict.fromkeys(KEY_STATISTICS, 0.0), dict.fromkeys(KEY_STATISTICS, (0.0, 0.0))
    next_token = table.next_tokens[keys, 0]
    # ranks[i, t]: rank of token t in value i's distribution (0 = top).
    ranks = np.argsort(np.argsort(-logits, axis=1, kind="stable"), axis=1)
    observed = ranks[keys, next_token]  # (keys,)
    shuffled = np.stack(
        [ranks[rng.permutation(keys), next_token] for _ in range(permutations)]
    )  # (permutations, keys): the triggers' next tokens given to other keys' values
    resampled = observed[rng.integers(0, len(keys), (resamples, len(keys)))]  # (resamples, keys)
    agreement, shuffled_agreement = np.mean(observed == 0), np.mean(shuffled == 0, axis=1)
    shuffled_rank = np.median(shuffled, axis=1)  # (permutations,)
    statistics = {
        "agreement_rate": agreement,
        "shuffled_agreement_rate": shuffled_agreement.mean(),
        "agreement_p_value": (1 + np.sum(shuffled_agreement >= agreement)) / (1 + permutations),
        "next_token_rank": np.median(observed),
        "shuffled_next_token_rank": shuffled_rank.mean(),
    }
    intervals = {
        "agreement_rate": np.mean(resampled == 0, axis=1),
        "shuffled_agreement_rate": shuffled_agreement,
        "next_token_rank": np.median(resampled, axis=1),
        "shuffled_next_token_rank": shuffled_rank,
    }
    return statistics, {name: np.percentile(v, [2.5, 97.5]) for name, v in intervals.items()}
