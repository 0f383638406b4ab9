"""Exact PARITY and FIRST transformers with hand-set weights.

From "Overcoming a Theoretical Limitation of Self-Attention" (Chiang &
Cholak, ACL 2022). Both models are two-layer transformer encoders built from
`MultiHeadSelfAttention`, `Dense` ReLU feed-forward layers and (optionally)
post-norm `LayerNormalization`, whose weights are set by hand so that they
classify bit strings of every length correctly. The constructions follow the
official code of the paper (`parity_exact*.py` and `first_exact*.py`): the
head sizes (`dim // num_heads`, as in PyTorch) and the default attention
scales are the same, so the logits and cross-entropies match.

Without layer norm the classifying signal at CLS shrinks as the strings grow
and the cross-entropy tends to 1 bit (Hahn's lemma). With layer norm the
residual stream is mirrored, `[x, -x]`, so that its mean is zero and layer
norm only rescales it; the last layer's feed-forward network cancels every
dimension except the result, so that after the last layer norm (with
`layer_norm_epsilon=0`, the paper's limit) the CLS output has the same
magnitude at every length. The builders default to the official code's
epsilon, `1e-5` (PyTorch's default), with which the CLS output shrinks again
as the strings grow.
"""

import keras
import numpy as np

from keras_attn.layers.bit_string_features import BitStringFeatures
from keras_attn.layers.multi_head_self_attention import MultiHeadSelfAttention
from keras_attn.utils.validation import check_float, check_positive, renamed_arguments

# Epsilon of the layer norms in the official layer-norm code (PyTorch's default).
OFFICIAL_LAYER_NORM_EPSILON = 1e-5

# Dimensions of the PARITY residual stream (before mirroring).
PARITY_DIM = 10
P_BIT_ONE, P_CLS, P_POSITION, P_SIGN = 1, 2, 3, 4
P_ONES, P_INVERSE_LENGTH, P_MARK, P_RESULT = 5, 6, 7, 8

# Dimensions of the FIRST residual stream (before mirroring).
FIRST_DIM = 6
F_BIT_ZERO, F_BIT_ONE, F_CLS, F_IS_FIRST, F_FIRST_IS_ONE, F_RESULT = 0, 1, 2, 3, 4, 5

# Per task: the residual stream's width (before mirroring), the attention
# heads of both layers and the hidden units of layer 1's feed-forward network.
_TASKS = {"parity": (PARITY_DIM, 2, 3), "first": (FIRST_DIM, 1, 1)}


@renamed_arguments(epsilon="layer_norm_epsilon")
def build_exact_parity_transformer(
    layer_norm: bool = False,
    layer_norm_epsilon: float = OFFICIAL_LAYER_NORM_EPSILON,
    output_scale: float = 1.0,
    attention_scale: float = 1.0,
    name: str = "exact_parity",
) -> keras.Model:
    """Builds the exact PARITY transformer as a functional Keras model.

    Layer 1 attends uniformly (zero query and key kernels) and writes `k / N`
    (`k` ones, `N = n + 1`) and `1 / N` to every position; its feed-forward
    network computes `[i = k] / N` at position `i` with three ReLUs combined
    with weights `[1, -2, 1]`. In layer 2, CLS attends (query
    `attention_scale` on the CLS symbol, in both heads) with keys `+(-1)^i`
    (head 1) and `-(-1)^i` (head 2) and takes the difference, which is
    positive iff the marked position `k` is odd.

    Args:
        layer_norm: bool, whether to add post-norm layer norms (and mirror
            the residual stream) after every residual connection.
        layer_norm_epsilon: float, epsilon of the layer norms, `1e-5` by
            default as in the official code; the logit then shrinks as the
            strings grow. `0` is the paper's limit: the logit is
            `±sqrt(10) * output_scale` at every length.
        output_scale: float, weight of the result dimension in the output
            layer; larger values drive the cross-entropy of the layer-norm
            model with `layer_norm_epsilon=0` towards 0.
        attention_scale: float, query weight of layer 2 (the official
            `--big`), 1 by default as in the official code.
        name: model name.

    Returns:
        A `keras.Model` from int tokens `(batch, n + 1)`, the bits (`0`/`1`)
        then CLS (`2`), for any `n`, to `(batch, 1)` logits, positive iff the
        number of ones is odd.

    Example:

    >>> model = build_exact_parity_transformer()
    >>> (model(np.array([[1, 0, 1, 2], [1, 1, 1, 2]]))[:, 0] > 0).numpy().tolist()
    [False, True]

    References:
        - [Chiang & Cholak, 2022](https://arxiv.org/abs/2202.12172)
    """
    model, mirror = _exact_model(
        "parity", layer_norm, layer_norm_epsilon, output_scale, attention_scale, name
    )
    half = mirror.half
    key_dim = mirror.dim // 2

    value = np.zeros((mirror.dim, 2, key_dim))
    value[P_BIT_ONE, 0, 0] = value[P_CLS, 0, 1] = 1.0  # head 1 averages ones and CLS
    output = np.zeros((2, key_dim, half))
    output[0, 0, P_ONES] = output[0, 1, P_INVERSE_LENGTH] = 1.0
    _set_attention(model.get_layer("layer_1_attention"), value=value, output=mirror.writes(output))

    hidden = np.zeros((mirror.dim, 3))
    hidden[P_ONES] = 1.0
    hidden[P_POSITION] = -1.0
    hidden[P_INVERSE_LENGTH] = [-1.0, 0.0, 1.0]  # ReLU(k - i - 1), ReLU(k - i), ReLU(k - i + 1)
    mark = np.zeros((3, half))
    mark[:, P_MARK] = [1.0, -2.0, 1.0]
    _set_mlp(model, 1, hidden, mirror.writes(mark))

    query = np.zeros((mirror.dim, 2, key_dim))
    query[P_CLS, :, 0] = attention_scale
    key = np.zeros((mirror.dim, 2, key_dim))
    key[P_SIGN, :, 0] = [1.0, -1.0]
    value = np.zeros((mirror.dim, 2, key_dim))
    value[P_MARK, :, 0] = 1.0
    output = np.zeros((2, key_dim, half))
    output[:, 0, P_RESULT] = [-1.0, 1.0]  # odd positions minus even positions
    _set_layer_2_and_output(model, mirror, P_RESULT, output_scale, query, key, value, output)
    return model


@renamed_arguments(epsilon="layer_norm_epsilon")
def build_exact_first_transformer(
    layer_norm: bool = False,
    layer_norm_epsilon: float = OFFICIAL_LAYER_NORM_EPSILON,
    output_scale: float = 1.0,
    attention_scale: float = 1.0,
    name: str = "exact_first",
) -> keras.Model:
    """Builds the exact FIRST transformer as a functional Keras model.

    Layer 1's feed-forward network computes `[i = 1 and bit 1]` with one
    ReLU. In layer 2, CLS attends to position 1 (query `attention_scale` on
    the CLS symbol, key `[i = 1]`) and reads `[first bit is 1] - 1/2`.

    Without layer norm the ReLU is `ReLU(bit1 + [i = 1] - 1)`. With layer
    norm it is `ReLU([i = 1] - bit0 - CLS)`, as in the official layer-norm
    construction: it has no bias, so it gives the same decision whatever
    positive factor the layer norm rescales a position by (the first form
    would also fire at position 1 holding a 0 and at every later 1).

    Args:
        layer_norm: bool, whether to add layer norms and mirror the residual
            stream, as in `build_exact_parity_transformer`.
        layer_norm_epsilon: float, epsilon of the layer norms, `1e-5` by
            default as in the official code; the logit then shrinks as the
            strings grow. `0` is the paper's limit: the logit is
            `±sqrt(6) * output_scale` at every length.
        output_scale: float, weight of the result dimension in the output
            layer.
        attention_scale: float, query weight of layer 2 (the official
            `--big`), 1 by default as in the official code. The attention
            to position 1 fades as strings grow, so without layer norm the
            cross-entropy tends to 1 bit; larger values only delay it.
        name: model name.

    Returns:
        A `keras.Model` from int tokens `(batch, n + 1)`, CLS (`2`) then the
        bits (`0`/`1`), for any `n`, to `(batch, 1)` logits, positive iff the
        first bit is 1.

    Example:

    With layer norm and `layer_norm_epsilon=0` the logit is `±sqrt(6)` at
    every length:

    >>> model = build_exact_first_transformer(layer_norm=True, layer_norm_epsilon=0.0)
    >>> logits = model(np.array([[2, 1, 0, 0], [2, 0, 1, 1]]))[:, 0]
    >>> (logits.numpy() / np.sqrt(6)).round(3).tolist()
    [1.0, -1.0]

    References:
        - [Chiang & Cholak, 2022](https://arxiv.org/abs/2202.12172)
    """
    model, mirror = _exact_model(
        "first", layer_norm, layer_norm_epsilon, output_scale, attention_scale, name
    )
    half = mirror.half

    hidden, hidden_bias = _first_detector(mirror)
    gate = np.zeros((1, half))
    gate[0, F_FIRST_IS_ONE] = 1.0
    _set_mlp(model, 1, hidden, mirror.writes(gate), hidden_bias=hidden_bias)

    query = np.zeros((mirror.dim, 1, mirror.dim))
    query[F_CLS, 0, 0] = attention_scale
    key = np.zeros((mirror.dim, 1, mirror.dim))
    key[F_IS_FIRST, 0, 0] = 1.0
    value = np.zeros((mirror.dim, 1, mirror.dim))
    value[F_IS_FIRST, 0, 0] = -0.5
    value[F_FIRST_IS_ONE, 0, 0] = 1.0
    output = np.zeros((1, mirror.dim, half))
    output[0, 0, F_RESULT] = 1.0
    _set_layer_2_and_output(model, mirror, F_RESULT, output_scale, query, key, value, output)
    return model


def _first_detector(mirror):
    """Layer 1's ReLU of FIRST: positive exactly at position 1 holding a 1.

    Returns the hidden kernel `(dim, 1)` and bias `(1,)`. With layer norm the
    detector is homogeneous (no bias), so each position's rescaling by the
    layer norm cannot change its sign.
    """
    hidden = np.zeros((mirror.dim, 1))
    hidden[F_IS_FIRST] = 1.0
    if mirror.mirrored:
        hidden[F_BIT_ZERO] = hidden[F_CLS] = -1.0  # ReLU([i = 1] - bit0 - CLS)
        return hidden, np.zeros(1)
    hidden[F_BIT_ONE] = 1.0  # ReLU(bit1 + [i = 1] - 1)
    return hidden, np.array([-1.0])


class _Mirror:
    """Maps weights written for the first half of a mirrored stream."""

    def __init__(self, half, mirrored):
        self.half = half
        self.mirrored = mirrored
        self.dim = 2 * half if mirrored else half

    def writes(self, kernel):
        """Appends the negated output columns: writes `w` and `-w`."""
        if not self.mirrored:
            return kernel
        return np.concatenate([kernel, -kernel], axis=-1)  # (..., 2 * half)


def _exact_model(task, layer_norm, layer_norm_epsilon, output_scale, attention_scale, name):
    """The checked arguments' two-layer model (weights still to set) and its mirror."""
    layer_norm_epsilon = check_float("layer_norm_epsilon", layer_norm_epsilon, low=0.0)
    check_positive("output_scale", output_scale)
    check_positive("attention_scale", attention_scale)
    half, num_heads, mlp_units = _TASKS[task]
    model = _build_two_layer_model(
        task,
        half,
        num_heads,
        layer_norm,
        layer_norm_epsilon,
        # Layer 2's MLP reads the mirrored stream `[x, -x]` with layer norm.
        intermediate_dims=(mlp_units, 2 * half if layer_norm else mlp_units),
        name=name,
    )
    return model, _Mirror(half, layer_norm)


def _build_two_layer_model(task, half, num_heads, layer_norm, epsilon, intermediate_dims, name):
    dim = 2 * half if layer_norm else half
    tokens = keras.Input(shape=(None,), dtype="int32", name="tokens")
    x = BitStringFeatures(task, half, mirrored=layer_norm, name="features")(tokens)
    for index, intermediate_dim in enumerate(intermediate_dims, start=1):
        attended = MultiHeadSelfAttention(
            num_heads,
            dim // num_heads,
            use_bias=False,
            kernel_initializer="zeros",
            name=f"layer_{index}_attention",
        )(x)
        x = _residual(x, attended, layer_norm, epsilon, f"layer_{index}_attention")
        hidden = keras.layers.Dense(
            intermediate_dim,
            activation="relu",
            kernel_initializer="zeros",
            name=f"layer_{index}_mlp_hidden",
        )(x)
        mlp = keras.layers.Dense(dim, kernel_initializer="zeros", name=f"layer_{index}_mlp_output")(
            hidden
        )
        x = _residual(x, mlp, layer_norm, epsilon, f"layer_{index}_mlp")
    cls = x[:, -1] if task == "parity" else x[:, 0]  # (batch, dim)
    logits = keras.layers.Dense(1, kernel_initializer="zeros", name="output")(cls)
    return keras.Model(tokens, logits, name=name)


def _residual(x, update, layer_norm, epsilon, name):
    x = keras.layers.Add(name=f"{name}_residual")([x, update])
    if layer_norm:
        x = keras.layers.LayerNormalization(epsilon=epsilon, name=f"{name}_norm")(x)
    return x


def _set_attention(layer, query=None, key=None, value=None, output=None):
    for dense, kernel in (
        (layer.query_dense, query),
        (layer.key_dense, key),
        (layer.value_dense, value),
        (layer.output_dense, output),
    ):
        if kernel is not None:
            dense.kernel.assign(kernel.astype("float32"))


def _set_mlp(model, index, hidden, output, hidden_bias=None):
    hidden_layer = model.get_layer(f"layer_{index}_mlp_hidden")
    hidden_layer.kernel.assign(hidden.astype("float32"))
    if hidden_bias is not None:
        hidden_layer.bias.assign(hidden_bias.astype("float32"))
    model.get_layer(f"layer_{index}_mlp_output").kernel.assign(output.astype("float32"))


def _set_layer_2_and_output(model, mirror, result, output_scale, query, key, value, output):
    """Sets layer 2 (its attention writes `output` mirrored) and the output layer.

    The output layer reads the dimension `result` alone, weighted by
    `output_scale`.
    """
    _set_attention(
        model.get_layer("layer_2_attention"),
        query=query,
        key=key,
        value=value,
        output=mirror.writes(output),
    )
    _set_cleanup_mlp(model, mirror, result)
    _set_output(model, mirror.dim, result, output_scale)


def _set_cleanup_mlp(model, mirror, result):
    """Layer 2's network subtracts every dimension but `result` (layer norm only).

    On a mirrored vector, `ReLU(x_j)` and `ReLU(-x_j)` recover `x_j`, so the
    hidden layer is the identity and the output `-x_j` cancels the residual.
    """
    if not mirror.mirrored:
        return
    half = mirror.half
    eye = np.eye(half)
    eye[result, result] = 0.0
    cancel = np.block([[-eye, eye], [eye, -eye]])  # (2 * half, 2 * half)
    _set_mlp(model, 2, np.eye(mirror.dim), cancel)


def _set_output(model, dim, result, output_scale):
    kernel = np.zeros((dim, 1))
    kernel[result, 0] = output_scale
    model.get_layer("output").kernel.assign(kernel.astype("float32"))
