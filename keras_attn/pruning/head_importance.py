"""Head importance scores of Michel et al. (2019), "Are sixteen heads really
better than one?" (https://arxiv.org/abs/1905.10650).
"""

import contextlib

import keras
import numpy as np

from keras_attn.pruning.attention_layers import attention_layers


def head_importance(model, data, loss, normalize=True, token_mask=None):
    """Scores each attention head by the loss gradient w.r.t. its mask.

    A mask `ξ_h` multiplies head `h`'s output, and the importance is
    `I_h = Σ_x Σ_t |∂L(x)/∂ξ_{h,t}|` at `ξ = 1`, where `t` runs over the
    positions: as in the official code, the absolute value is taken per
    token (`|<context_h, ∂L/∂context_h>|`) before summing. The sums are
    scaled as in the official code: the last attention layer's by the
    number of examples, every other layer's by the number of real (not
    padding) tokens. With `normalize=True` the scores of each layer are
    then divided by their l2 norm, as the paper does before pruning
    globally, which removes these per-layer factors.

    The mask is applied by multiplying the input of each attention layer's
    output projection (its `output_dense`) during the computation, so any
    model works unchanged: functional or not, with
    `keras_attn.layers.MultiHeadSelfAttention` or
    `keras.layers.MultiHeadAttention`, at the top level or nested in other
    layers. Needs the TensorFlow backend (for the gradient tape).

    Args:
        model: a built Keras model.
        data: iterable of `(x, y)` batches, `x` as accepted by `model`.
        loss: callable `loss(y_true, y_pred)` returning per-example losses,
            or a `keras.losses.Loss`, whose reduction is then not applied:
            the per-example losses are summed, so that each example's mask
            gradient is its own.
        normalize: bool, divide each layer's scores by their l2 norm.
        token_mask: optional callable from a batch's `x` to a
            `(batch, length)` array that is nonzero at real tokens, used to
            count them. Defaults to every position of the batch (the first
            attention layer's sequence length).

    Returns:
        dict `layer name -> (num_heads,) numpy array` (keys as in
        `attention_layers(model)`).

    Example:

    ```python
    scores = head_importance(classifier, [(x, y)], "sparse_categorical_crossentropy")
    ```

    References:
        - [Michel et al., 2019](https://arxiv.org/abs/1905.10650)
    """
    if keras.backend.backend() != "tensorflow":
        raise ValueError(
            "`head_importance` needs the TensorFlow backend. "
            f"Received: backend={keras.backend.backend()!r}"
        )
    import tensorflow as tf

    layers = attention_layers(model)
    if not layers:
        raise ValueError(f"`model` has no attention layers. Received: model={model.name!r}")
    per_example_loss = _per_example_loss(loss)
    totals = {name: np.zeros(layer.num_heads) for name, layer in layers.items()}
    examples = tokens = 0
    for x, y in data:
        with tf.GradientTape() as tape, _gated_heads(layers, tape) as gates:
            total_loss = tf.reduce_sum(per_example_loss(y, model(x, training=False)))
        gradients = tape.gradient(total_loss, gates)
        for name, gradient in gradients.items():
            # (batch, length, heads, 1) -> (heads,)
            totals[name] += np.abs(gradient.numpy()).sum(axis=(0, 1, 3))
        first_gate = gates[next(iter(layers))]  # (batch, length, heads, 1)
        examples += int(first_gate.shape[0])
        tokens += _count_tokens(token_mask, x, first_gate)
    last = list(layers)[-1]
    scores = {
        name: total / max(examples if name == last else tokens, 1) for name, total in totals.items()
    }
    if normalize:
        scores = {name: score / (np.linalg.norm(score) + 1e-20) for name, score in scores.items()}
    return scores


def _count_tokens(token_mask, x, gate):
    if token_mask is None:
        return int(gate.shape[0]) * int(gate.shape[1])
    return int(np.count_nonzero(keras.ops.convert_to_numpy(token_mask(x))))


def _per_example_loss(loss):
    if isinstance(loss, keras.losses.Loss):
        return loss.call
    return keras.losses.get(loss)


@contextlib.contextmanager
def _gated_heads(layers, tape):
    """Multiplies each head's output by a watched gate of ones.

    Yields a dict `name -> gate`, filled when the model runs; each gate has
    shape `(batch, length, heads, 1)`, so its gradient is the per-token
    mask gradient.
    """
    gates = {}
    projections = {name: layer.output_dense for name, layer in layers.items()}
    for name, projection in projections.items():
        projection.call = _gated_call(projection.call, name, gates, tape)
    try:
        yield gates
    finally:
        for projection in projections.values():
            del projection.call


def _gated_call(call, name, gates, tape):
    import tensorflow as tf

    def gated(inputs, *args, **kwargs):
        gate = tf.ones_like(inputs[..., :1])  # (batch, length, heads, 1)
        tape.watch(gate)
        gates[name] = gate
        return call(inputs * gate, *args, **kwargs)

    return gated
