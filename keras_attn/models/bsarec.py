"""BSARec and SASRec next-item recommenders (Shin et al., AAAI 2024).

"An Attentive Inductive Bias for Sequential Recommendation beyond the
Self-Attention". Both models embed a left-padded item history, add learned
positions, run a stack of `BSARecBlock`s and score every item with the
transposed item embedding at the last position. SASRec (Kang & McAuley,
2018) is the same model with `alpha = 0`: attention-only blocks, as in the
official BSARec code's baseline.
"""

import keras

from keras_attn.layers import BSARecBlock, CheckedEmbedding, PositionEmbedding
from keras_attn.layers.bsa_rec_block import OFFICIAL_ADDITIVE_MASK
from keras_attn.utils.validation import check_bool, check_heads, check_int, renamed_arguments

INITIALIZER = {"class_name": "RandomNormal", "config": {"stddev": 0.02}}


@renamed_arguments(max_length="max_sequence_length")
def build_bsarec(
    num_items: int,
    max_sequence_length: int = 50,
    hidden_dim: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    alpha: float = 0.9,
    cutoff: int = 3,
    dropout: float = 0.5,
    attention_dropout: float = 0.5,
    additive_mask: float | None = OFFICIAL_ADDITIVE_MASK,
    seed: int | None = None,
    last_position_only: bool = True,
    name: str = "bsarec",
) -> keras.Model:
    """Builds BSARec as a functional Keras model.

    Defaults are the official code's: hidden size 64, 2 blocks, 2 heads,
    `alpha = 0.9`, `c = 3`, dropout 0.5, max length 50, weights drawn from a
    normal with standard deviation 0.02.

    Args:
        num_items: int, number of items; ids run from 1 to `num_items` and
            0 is padding.
        max_sequence_length: int, length of the (left-padded) input histories.
        hidden_dim: int, hidden size.
        num_layers: int, number of blocks.
        num_heads: int, attention heads per block.
        alpha: float in `[0, 1]`, weight of the Fourier filter branch;
            `0` gives SASRec.
        cutoff: int, the paper's `c`: the filter keeps `c // 2 + 1` bins.
        dropout: float, dropout of the embeddings and of every branch.
        attention_dropout: float, dropout of the attention weights.
        additive_mask: negative float or `None`. Defaults to the official
            code's `-10000.0`, added to the attention logits of padded and
            future items, so that the model matches the official one on
            left-padded histories at every real position: the padded
            positions then attend over the whole history and, through the
            filter of the next block, reach the real ones (see
            `BSARecBlock`). `None` masks exactly instead (padded positions
            get a zero attention context).
        seed: int, seed of the dropout layers.
        last_position_only: bool. `True` (default): the last block computes
            the most recent position only (`BSARecBlock(last_positions=1)`),
            the only one scored; the logits and the training are those of
            the full model, in about half the time. `False`: every block
            outputs every position, for reading the last block's hidden
            states.
        name: model name.

    Returns:
        A `keras.Model` from `(batch, max_sequence_length)` int item ids (0 = padding,
        most recent item last) to `(batch, num_items + 1)` next-item logits;
        column 0 is the padding item. Train it with softmax cross-entropy
        (`from_logits=True`). Its blocks are the layers named `block_i`.

    Example:

    >>> model = build_bsarec(num_items=100, max_sequence_length=20)
    >>> model(np.array([[0] * 17 + [4, 8, 15]])).shape
    (1, 101)

    References:
        - [Shin et al., 2024](https://arxiv.org/abs/2312.10325)
    """
    num_items = check_int("num_items", num_items)
    max_sequence_length = check_int("max_sequence_length", max_sequence_length)
    num_layers = check_int("num_layers", num_layers)
    last_position_only = check_bool("last_position_only", last_position_only)
    hidden_dim, num_heads = check_heads(hidden_dim, num_heads)
    item_ids = keras.Input(shape=(max_sequence_length,), dtype="int32", name="item_ids")
    items = CheckedEmbedding(
        num_items + 1,
        hidden_dim,
        ids_name="item_ids",
        embeddings_initializer=INITIALIZER,
        mask_zero=True,
        name="items",
    )
    x = items(item_ids)  # (batch, max_sequence_length, hidden_dim)
    x = PositionEmbedding(max_sequence_length, initializer=INITIALIZER, name="positions")(x)
    x = keras.layers.LayerNormalization(epsilon=1e-12, name="embedding_norm")(x)
    x = keras.layers.Dropout(dropout, seed=seed, name="embedding_dropout")(x)
    for index in range(num_layers):
        x = BSARecBlock(
            num_heads,
            alpha=alpha,
            cutoff=cutoff,
            dropout=dropout,
            attention_dropout=attention_dropout,
            additive_mask=additive_mask,
            kernel_initializer=INITIALIZER,
            seed=seed,
            last_positions=1 if last_position_only and index == num_layers - 1 else None,
            name=f"block_{index}",
        )(x)
    last = x[:, -1]  # (batch, hidden_dim), the most recent position
    logits = items(last, reverse=True)  # (batch, num_items + 1)
    return keras.Model(item_ids, logits, name=name)


@renamed_arguments(max_length="max_sequence_length")
def build_sasrec(
    num_items: int,
    max_sequence_length: int = 50,
    hidden_dim: int = 64,
    num_layers: int = 2,
    num_heads: int = 2,
    dropout: float = 0.5,
    attention_dropout: float = 0.5,
    additive_mask: float | None = OFFICIAL_ADDITIVE_MASK,
    seed: int | None = None,
    last_position_only: bool = True,
    name: str = "sasrec",
) -> keras.Model:
    """Builds the SASRec baseline: `build_bsarec` with attention-only blocks.

    Causal multi-head self-attention (the library's `MultiHeadSelfAttention`)
    with padded items masked, post-norm residual branches and a 4x GELU
    feed-forward network, as the official BSARec code's SASRec. The model
    is the same whichever way it is trained; the official SASRec trains it
    with binary cross-entropy on the target and one sampled negative item
    (`loss="bce"` of `keras_attn.recommendation.fit_recommender`), BSARec
    with softmax cross-entropy over all items (`loss="softmax"`).

    Args:
        num_items: int, number of items (ids 1..num_items, 0 is padding).
        max_sequence_length: int, length of the left-padded input histories.
        hidden_dim: int, hidden size.
        num_layers: int, number of blocks.
        num_heads: int, attention heads per block.
        dropout: float, dropout of the embeddings and branches.
        attention_dropout: float, dropout of the attention weights.
        additive_mask: negative float or `None`, as in `build_bsarec`
            (defaults to the official `-10000.0`).
        seed: int, seed of the dropout layers.
        last_position_only: bool, as in `build_bsarec`: the last block
            computes the scored position only (default) or every position.
        name: model name.

    Returns:
        A `keras.Model` from `(batch, max_sequence_length)` item ids to
        `(batch, num_items + 1)` next-item logits.

    Example:

    >>> model = build_sasrec(num_items=100, max_sequence_length=20)
    >>> model(np.array([[0] * 17 + [4, 8, 15]])).shape
    (1, 101)

    References:
        - [Kang & McAuley, 2018](https://arxiv.org/abs/1808.09781)
    """
    return build_bsarec(
        num_items,
        max_sequence_length=max_sequence_length,
        hidden_dim=hidden_dim,
        num_layers=num_layers,
        num_heads=num_heads,
        alpha=0.0,
        dropout=dropout,
        attention_dropout=attention_dropout,
        additive_mask=additive_mask,
        seed=seed,
        last_position_only=last_position_only,
        name=name,
    )
