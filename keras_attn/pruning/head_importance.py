"""Head importance scores of Michel et al. (2019), "Are sixteen heads really
better than one?" (https://arxiv.org/abs/1905.10650).
"""

import math
from collections.abc import Callable, Iterable
from typing import Any

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.interop.model_layers import gate_heads
from keras_attn.kernels import runtime
from keras_attn.pruning.attention_layers import attention_layers


def head_importance(
    model: keras.Model,
    data: Iterable[tuple[Any, Tensor]],
    loss: str | Callable[[Tensor, Tensor], Tensor] | keras.losses.Loss,
    normalize: bool = True,
    token_mask: Callable[[Any], Tensor] | None = None,
) -> dict[str, np.ndarray]:
    """Scores each attention head by the loss gradient w.r.t. its mask.

    This is the quantity of the official code (Michel et al.'s
    `calculate_head_importance`) for the same batches. A mask `ξ_h`
    multiplies head `h`'s output, and each batch's loss `L` is the mean of
    its per-example losses (the official cross-entropy's reduction). The
    importance sums `|∂L/∂ξ_{h,t}|` at `ξ = 1` over the positions `t` and
    examples of every batch: as in the official code, the absolute value is
    taken per token (`|<context_h, ∂L/∂context_h>|`) before summing, and an
    example weighs `1 / batch size` of its batch, so a partial last batch
    weighs its examples more, as there. The sums are then scaled as in the
    official code: the last attention layer's (in `attention_layers` order)
    by the number of examples, every other layer's by the number of real
    (not padding) tokens. With `normalize=True` the scores of each layer are
    then divided by their l2 norm, as the paper does before pruning
    globally, which removes these per-layer factors (but not the batch
    weights).

    The mask is applied by `keras_attn.interop.gate_heads`, which multiplies
    the input of each attention layer's output projection during the
    computation, so any model works unchanged: functional, `Sequential` or
    subclassed, with `keras_attn.layers.MultiHeadSelfAttention` or
    `keras.layers.MultiHeadAttention` (KerasHub's backbones included), at
    the top level or nested in other layers and models. The gradients come
    from the backend's own autodiff (TensorFlow's gradient tape, `jax.grad`
    or torch's autograd). Each attention layer must run once per model
    call: a layer called twice (shared between two inputs) raises a
    `ValueError` naming it. A Keras `MultiHeadAttention` over several axes
    (`attention_axes`, as on images) counts each of their index tuples as a
    position. A layer whose output does not reach the loss scores 0 for
    every head, its gradient, on every backend.

    Args:
        model: a built Keras model.
        data: iterable of `(x, y)` batches, `x` as accepted by `model`.
        loss: callable `loss(y_true, y_pred)` returning per-example losses,
            or a `keras.losses.Loss` (its unreduced `call` is used); the
            batch's loss is their mean.
        normalize: bool, divide each layer's scores by their l2 norm.
        token_mask: optional callable from a batch's `x` to a
            `(batch, length)` array that is nonzero at real tokens, used to
            count them. By default, the nonzero entries of `x["padding_mask"]`
            when `x` is a dict with that key (keras_attn's encoders and
            KerasHub's text backbones), else every position of the batch
            that the first attention layer attends over.

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
    layers = attention_layers(model)
    if not layers:
        raise ValueError(f"`model` has no attention layers. Received: model={model.name!r}")
    per_example_loss = _per_example_loss(loss)
    totals = {name: np.zeros(layer.num_heads) for name, layer in layers.items()}
    examples = tokens = 0
    for x, y in data:
        y = keras.tree.map_structure(keras.ops.convert_to_tensor, y)

        def total_loss(x=x, y=y):
            return keras.ops.mean(per_example_loss(y, model(x, training=False)))

        gates, gradients = _gate_gradients(layers, total_loss)
        for name, (gradient,) in gradients.items():
            gradient = np.abs(keras.ops.convert_to_numpy(gradient))
            # (batch, *positions, heads, 1) -> (heads,)
            totals[name] += gradient.sum(axis=tuple(range(gradient.ndim - 2)) + (-1,))
        first_gate = gates[next(iter(layers))][0]  # (batch, *positions, heads, 1)
        examples += int(first_gate.shape[0])
        tokens += _count_tokens(token_mask, x, first_gate)
    last = list(layers)[-1]
    scores = {
        name: total / max(examples if name == last else tokens, 1) for name, total in totals.items()
    }
    if normalize:
        scores = {name: score / (np.linalg.norm(score) + 1e-20) for name, score in scores.items()}
    return scores


def _gate_gradients(layers, total_loss):
    """Runs `total_loss()` with gated heads; returns the gates and the loss gradients.

    Both are dicts `name -> [gate]` (one entry per call of the layer), each
    `(batch, *positions, heads, 1)`, differentiated with the backend's own
    autodiff. A first run makes the gates (their shapes are known only
    then); the loss is differentiated at them in a second. A gate that does
    not reach the loss has a zero gradient.
    """
    gates, _ = _run_gated(layers, total_loss, lambda name, ones: ones)
    names = list(gates)

    def loss_of_gates(*values):
        given = dict(zip(names, values, strict=True))
        return _run_gated(layers, total_loss, lambda name, ones: given[name])[1], None

    gradients, _ = runtime.gradients(
        loss_of_gates, [gates[name][0] for name in names], purpose="`head_importance`"
    )
    return gates, {name: [gradient] for name, gradient in zip(names, gradients, strict=True)}


def _run_gated(layers, total_loss, make_gate):
    """`(gates, total_loss())` with each head's output multiplied by a gate.

    `make_gate(name, ones)` returns the gate of layer `name` from a tensor
    of ones of shape `(batch, *positions, heads, 1)` (see
    `keras_attn.interop.gate_heads`), so its gradient is the per-token mask
    gradient. A layer called more than once per model call is refused: one
    gate per head and token would be ambiguous.
    """
    with gate_heads(layers, make_gate, compiled_calls=False) as gates:  # direct calls only
        total = total_loss()
    for name, calls in gates.items():
        if len(calls) != 1:
            raise ValueError(
                "`head_importance` needs each attention layer to run once per call of the "
                f"model. Received: layer={name!r}, run {len(calls)} times"
            )
    return gates, total


def _count_tokens(token_mask, x, gate):
    """The real tokens of batch `x`: `token_mask(x)`, its padding mask or every position.

    Every position is each of the `gate`'s `(batch, *positions)`: a layer
    that attends over two axes (`attention_axes` of a Keras
    `MultiHeadAttention`) has one per pair of indices.
    """
    if token_mask is not None:
        return int(np.count_nonzero(keras.ops.convert_to_numpy(token_mask(x))))
    if isinstance(x, dict) and "padding_mask" in x:
        return int(np.count_nonzero(keras.ops.convert_to_numpy(x["padding_mask"])))
    return math.prod(int(size) for size in gate.shape[:-2])


def _per_example_loss(loss):
    if isinstance(loss, keras.losses.Loss):
        return loss.call
    return keras.losses.get(loss)
