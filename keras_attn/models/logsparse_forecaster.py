"""Probabilistic forecaster with convolutional and LogSparse self-attention.

Paper: Li et al., "Enhancing the Locality and Breaking the Memory Bottleneck
of Transformer on Time Series Forecasting", NeurIPS 2019.
"""

from collections.abc import Mapping

import keras

from keras_attn.layers.checked_embedding import CheckedEmbedding
from keras_attn.layers.convolutional_self_attention import ConvolutionalSelfAttention
from keras_attn.layers.gaussian_head import GaussianHead
from keras_attn.layers.log_sparse_attention import LogSparseAttention
from keras_attn.layers.position_embedding import PositionEmbedding
from keras_attn.layers.transformer_block import TransformerBlock
from keras_attn.utils.validation import check_heads, check_int, renamed_arguments

ATTENTIONS = ("full", "logsparse")


@renamed_arguments(max_length="max_sequence_length")
def build_logsparse_forecaster(
    max_sequence_length: int,
    covariate_vocab_sizes: Mapping[str, int] | None = None,
    hidden_dim: int = 32,
    num_heads: int = 4,
    num_layers: int = 3,
    intermediate_dim: int | None = None,
    attention: str = "logsparse",
    variant: str = "local",
    local_window: int = 8,
    subsequence_length: int | None = None,
    kernel_size: int = 9,
    dropout: float = 0.1,
    min_scale: float = 1e-3,
    name: str = "logsparse_forecaster",
) -> keras.Model:
    """Builds a decoder-only transformer that predicts a Gaussian per step.

    At step `t` the model reads the previous target value `z[t-1]` and the
    covariates of step `t` (for example hour of day and day of week), and
    outputs the mean and standard deviation of `z[t]`. Inputs are embedded
    as `Dense(z[t-1]) + sum_i Embedding_i(covariate_i[t]) + position`
    (learned positions), followed by `num_layers` pre-norm
    `TransformerBlock`s (causal self-attention, then a GELU MLP, each with a
    residual), a layer norm and a `GaussianHead`. Every attention layer is causal, so the model
    trains on all steps of a window at once with
    `GaussianNegativeLogLikelihood` and forecasts autoregressively.

    The paper's series embedding (one per series of a multi-series data
    set) is left to the covariates: pass the series id as one.

    Args:
        max_sequence_length: int, longest window (conditioning + forecast steps).
        covariate_vocab_sizes: dict `name -> number of values` of the
            integer covariates; each becomes an input named `name`. Defaults
            to `{"hour_of_day": 24, "day_of_week": 7}`.
        hidden_dim: int, model width.
        num_heads: int, attention heads; `hidden_dim` must be divisible by it.
        num_layers: int, number of transformer blocks.
        intermediate_dim: int, MLP hidden size. Defaults to `4 * hidden_dim`.
        attention: `"full"` (causal attention over the whole past) or
            `"logsparse"` (`LogSparseAttention`).
        variant: LogSparse variant, `"pure"`, `"local"` or `"restart"`.
        local_window: dense window of the `"local"` variant.
        subsequence_length: subsequence length of the `"restart"` variant.
        kernel_size: int, kernel of the causal convolution of queries and
            keys (convolutional self-attention); 1 is canonical attention.
        dropout: float, dropout after attention and in the MLP.
        min_scale: float, floor of the predicted standard deviation.
        name: model name.

    Returns:
        A functional `keras.Model` with inputs `{"lagged_target": (batch,
        length, 1), <covariate>: (batch, length) int32, ...}` and output
        `(batch, length, 2)`: mean and standard deviation of each step.
        Its blocks are the layers named `block_0`, `block_1`, ..., each
        with its attention layer as `attention`.

    Example:

    >>> model = build_logsparse_forecaster(max_sequence_length=48, hidden_dim=16, num_layers=1)
    >>> inputs = {"lagged_target": np.zeros((2, 48, 1)),
    ...           "hour_of_day": np.zeros((2, 48), "int32"),
    ...           "day_of_week": np.zeros((2, 48), "int32")}
    >>> model(inputs).shape
    (2, 48, 2)

    References:
        - [Li et al., 2019](https://arxiv.org/abs/1907.00235)
    """
    if attention not in ATTENTIONS:
        raise ValueError(
            f"`attention` must be one of {ATTENTIONS}. Received: attention={attention!r}"
        )
    max_sequence_length = check_int("max_sequence_length", max_sequence_length)
    num_layers = check_int("num_layers", num_layers)
    hidden_dim, num_heads = check_heads(hidden_dim, num_heads)
    if covariate_vocab_sizes is None:
        covariate_vocab_sizes = {"hour_of_day": 24, "day_of_week": 7}
    covariate_vocab_sizes = {
        key: check_int(f"covariate_vocab_sizes[{key!r}]", size)
        for key, size in covariate_vocab_sizes.items()
    }
    lagged = keras.Input(shape=(None, 1), name="lagged_target")
    covariates = {
        key: keras.Input(shape=(None,), dtype="int32", name=key) for key in covariate_vocab_sizes
    }
    target_embedding = keras.layers.Dense(hidden_dim, name="target_embedding")
    x = target_embedding(lagged)  # (batch, length, hidden_dim)
    for key, size in covariate_vocab_sizes.items():
        embedding = CheckedEmbedding(size, hidden_dim, ids_name=key, name=f"{key}_embedding")
        embedded = embedding(covariates[key])  # (batch, length, hidden_dim)
        x = keras.layers.Add(name=f"add_{key}")([x, embedded])
    x = PositionEmbedding(max_sequence_length, name="position_embedding")(x)
    x = keras.layers.Dropout(dropout)(x)
    for index in range(num_layers):
        attention_layer = forecaster_attention(
            attention,
            hidden_dim // num_heads,
            num_heads=num_heads,
            variant=variant,
            local_window=local_window,
            subsequence_length=subsequence_length,
            kernel_size=kernel_size,
        )
        x = TransformerBlock(
            intermediate_dim=intermediate_dim or 4 * hidden_dim,
            dropout=dropout,
            attention=attention_layer,
            name=f"block_{index}",
        )(x)
    x = keras.layers.LayerNormalization(epsilon=1e-6, name="final_norm")(x)
    outputs = GaussianHead(min_scale=min_scale, name="gaussian_head")(x)
    return keras.Model({"lagged_target": lagged, **covariates}, outputs, name=name)


def forecaster_attention(
    attention: str,
    key_dim: int,
    num_heads: int,
    variant: str,
    local_window: int | None,
    subsequence_length: int | None,
    kernel_size: int,
) -> keras.layers.Layer:
    """The attention layer of one block of `build_logsparse_forecaster`.

    Also built on its own by `keras_attn.forecasting` to plan its memory.

    Args:
        attention: `"logsparse"` or `"full"` (convolutional self-attention).
        key_dim: int, size of each head.
        num_heads: int, number of heads.
        variant: LogSparse variant, `"pure"`, `"local"` or `"restart"`.
        local_window: int, the window of the `"local"` variant.
        subsequence_length: int, the subsequence of the `"restart"` variant.
        kernel_size: int, width of the causal convolution of queries and keys.

    Returns:
        An unbuilt `ConvolutionalSelfAttention` or `LogSparseAttention` named `"attention"`.
    """
    if attention == "full":
        return ConvolutionalSelfAttention(
            num_heads, key_dim, kernel_size=kernel_size, name="attention"
        )
    return LogSparseAttention(
        num_heads,
        key_dim,
        variant=variant,
        local_window=local_window if variant == "local" else None,
        subsequence_length=subsequence_length if variant == "restart" else None,
        kernel_size=kernel_size,
        name="attention",
    )
