"""AdaViT's training recipe: a ViT pretrained, then fine-tuned with and without gates."""

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np
from keras import ops

from keras_attn.models.adavit.model import AdaViT
from keras_attn.models.vision_transformer import build_vision_transformer
from keras_attn.utils.training import build_optimizer, scale_learning_rates
from keras_attn.utils.validation import check_bool, check_float, check_positive


def pretrain_vit(
    x: np.ndarray,
    y: np.ndarray,
    num_classes: int,
    epochs: int,
    *,
    seed: int = 0,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    jit_compile: bool = True,
    **vit: Any,
) -> keras.Model:
    """A ViT classifier trained from scratch, the backbone to fine-tune as an `AdaViT`.

    Builds `build_vision_transformer(x.shape[1:], num_classes, **vit)` under
    `seed` and trains it with Adam and sparse categorical cross-entropy,
    under XLA unless `jit_compile=False`.

    Args:
        x: numpy images, `(n, ...)` as the ViT's input.
        y: integer labels `(n,)`.
        num_classes: int, the classes of the softmax head.
        epochs: int, passes over `(x, y)`.
        seed: int, seed of the weights and the data order.
        batch_size: int.
        learning_rate: float, Adam's learning rate.
        jit_compile: bool, whether training compiles with XLA (with
            `torch.compile` on torch, which takes minutes: pass `False`
            there).
        **vit: arguments of `build_vision_transformer`, such as `patch_size`.

    Returns:
        The trained functional ViT.

    Example:

    >>> x, y = np.zeros((4, 8, 8), "float32"), np.zeros(4, "int32")
    >>> vit = pretrain_vit(x, y, 10, epochs=2, batch_size=2, jit_compile=False, hidden_dim=8,
    ...                    num_layers=1, num_heads=2)
    >>> vit.output.shape, int(vit.optimizer.iterations)  # 2 epochs of 2 batches
    ((None, 10), 4)
    """
    jit_compile = check_bool("jit_compile", jit_compile)
    keras.utils.set_random_seed(seed)
    vit_model = build_vision_transformer(x.shape[1:], num_classes, **vit)
    optimizer = keras.optimizers.Adam(learning_rate)
    return _fit(vit_model, x, y, epochs, batch_size, optimizer, jit_compile)


def finetune_adavit(
    vit: keras.Model,
    x: np.ndarray,
    y: np.ndarray,
    target_usage: float | Sequence[float],
    epochs: int,
    *,
    seed: int = 0,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    optimizer: keras.optimizers.Optimizer | None = None,
    gate_learning_rate_scale: float | Sequence[float] = 1.0,
    distillation_weight: float = 0.0,
    distillation_temperature: float = 5.0,
    callbacks: Sequence[keras.callbacks.Callback] = (),
    jit_compile: bool = True,
    **adavit: Any,
) -> AdaViT:
    """An `AdaViT` on a copy of `vit`, gates and backbone fine-tuned at a usage target.

    `vit` itself is left unchanged: the AdaViT wraps a clone with its
    weights. Trained with Adam (or `optimizer`, whose update step then
    applies the gates' factors) and sparse categorical cross-entropy plus
    the usage loss, under XLA unless `jit_compile=False`.

    Two options of the official training code (`ada_main.py`), off by
    default as there. `gate_learning_rate_scale` is its `--ada-lr-scaling`
    with `--ada-token-lr-scale`, `--ada-head-lr-scale` and
    `--ada-layer-lr-scale`: the gates' variables are updated at the learning
    rate times their scale. `distillation_weight` is the prediction term of
    its `TeacherLoss` (which `ada_main.py` imports but never uses): the
    frozen `vit` is the teacher, and the loss adds
    `distillation_weight · mean_batch(−Σ_c softmax(z_t/τ)_c · log softmax(z_s/τ)_c)`,
    `z_t`, `z_s` the teacher's and the AdaViT's logits (the logs of their
    probabilities) and `τ = distillation_temperature`. The images are not
    augmented, so the teacher's outputs are computed once, before training.

    Args:
        vit: a trained functional ViT, such as `pretrain_vit` returns.
        x: numpy images.
        y: integer labels `(n,)`.
        target_usage: float γ in `(0, 1]`, or a `(patches, heads, blocks)`
            tuple of three.
        epochs: int, passes over `(x, y)`.
        seed: int, seed of the gates, the Gumbel noise and the data order.
        batch_size: int.
        learning_rate: float, Adam's learning rate.
        optimizer: optional `keras.optimizers.Optimizer` used instead of
            Adam and `learning_rate`, such as an AdamW with a warm-up and
            cosine schedule (the official optimiser and schedule).
        gate_learning_rate_scale: float > 0, the factor of the gates'
            learning rate, or a `(patches, heads, blocks)` tuple of three,
            one per kind of gate (1, as in the official default).
        distillation_weight: float >= 0, the weight of the teacher's
            predictions in the loss (0, as in the official training; its
            `TeacherLoss` default is 0.5).
        distillation_temperature: float > 0, the distillation's τ (5, the
            official `TeacherLoss` default).
        callbacks: Keras callbacks of the training, such as a
            `UsageTargetEarlyStopping`.
        jit_compile: bool, whether training compiles with XLA (with
            `torch.compile` on torch, which takes minutes: pass `False`
            there).
        **adavit: further `AdaViT` arguments, such as `gate_bias`.

    Returns:
        The fine-tuned `AdaViT`, compiled with `jit_compile`, sparse
        categorical cross-entropy and accuracy.

    Example:

    >>> x, y = np.zeros((4, 8, 8), "float32"), np.zeros(4, "int32")
    >>> vit = build_vision_transformer((8, 8), 10, hidden_dim=8, num_layers=2, num_heads=2)
    >>> model = finetune_adavit(vit, x, y, 0.5, epochs=1, batch_size=2, jit_compile=False,
    ...                         gate_learning_rate_scale=10.0, distillation_weight=0.5)
    >>> int(model.optimizer.iterations), model.loss  # 1 epoch of 2 batches
    (2, 'sparse_categorical_crossentropy')
    """
    model, targets = compiled_for_finetuning(
        vit,
        x,
        y,
        target_usage,
        seed=seed,
        batch_size=batch_size,
        learning_rate=learning_rate,
        optimizer=optimizer,
        gate_learning_rate_scale=gate_learning_rate_scale,
        distillation_weight=distillation_weight,
        distillation_temperature=distillation_temperature,
        jit_compile=jit_compile,
        **adavit,
    )
    callbacks = list(callbacks)
    model.fit(x, targets, epochs=epochs, batch_size=batch_size, callbacks=callbacks, verbose=0)
    if targets is not y:  # the teacher's outputs were a training target only
        compile_for_evaluation(model, jit_compile)
    return model


def compiled_for_finetuning(
    vit: keras.Model,
    x: np.ndarray,
    y: np.ndarray,
    target_usage: float | Sequence[float],
    *,
    seed: int = 0,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    optimizer: keras.optimizers.Optimizer | None = None,
    gate_learning_rate_scale: float | Sequence[float] = 1.0,
    distillation_weight: float = 0.0,
    distillation_temperature: float = 5.0,
    jit_compile: bool = True,
    **adavit: Any,
) -> tuple[AdaViT, np.ndarray]:
    """The `AdaViT` of `finetune_adavit`, compiled and its optimizer built, and its targets.

    What `finetune_adavit` trains, before its first step, for a caller that
    runs the epochs itself (a run that saves and resumes its state). The
    arguments are those of `finetune_adavit`.

    Returns:
        `(model, targets)`: `targets` is `y`, or with distillation the
        labels beside the teacher's probabilities, `(n, 1 + classes)`, that
        the model's loss takes. After training with such targets,
        `compile_for_evaluation` compiles the model for labels.

    Example:

    >>> x, y = np.zeros((4, 8, 8), "float32"), np.zeros(4, "int32")
    >>> vit = build_vision_transformer((8, 8), 10, hidden_dim=8, num_layers=2, num_heads=2)
    >>> model, targets = compiled_for_finetuning(vit, x, y, 0.5, distillation_weight=0.5)
    >>> model.optimizer.built, targets.shape  # the label, then 10 probabilities
    (True, (4, 11))
    """
    if optimizer is not None and not isinstance(optimizer, keras.optimizers.Optimizer):
        raise ValueError(
            f"`optimizer` must be a keras.optimizers.Optimizer. Received: optimizer={optimizer!r}"
        )
    scales = _gate_scales(gate_learning_rate_scale)
    weight = check_float("distillation_weight", distillation_weight, low=0.0)
    temperature = check_positive("distillation_temperature", distillation_temperature)
    jit_compile = check_bool("jit_compile", jit_compile)
    keras.utils.set_random_seed(seed)
    backbone = keras.models.clone_model(vit)
    backbone.set_weights(vit.get_weights())
    model = AdaViT(backbone, target_usage=target_usage, seed=seed, **adavit)
    model.build(x.shape)  # its gates, so that the optimizer can be built before `fit`
    gates = (model.patch_gates, model.head_gates, model.block_gates)
    scaled = [
        ([v for gate in kind for v in gate.trainable_variables], scale)
        for kind, scale in zip(gates, scales, strict=True)
    ]
    optimizer = scale_learning_rates(optimizer or keras.optimizers.Adam(learning_rate), scaled)
    if weight == 0:
        _compile(model, optimizer, jit_compile)
        return model, y
    teacher = vit.predict(x, batch_size=batch_size, verbose=0)  # (n, classes)
    targets = np.concatenate([y.reshape(-1, 1), teacher], axis=1).astype("float32")
    loss = _distillation_loss(weight, temperature)
    _compile(model, optimizer, jit_compile, loss=loss, metrics=None)
    return model, targets


def compile_for_evaluation(model: keras.Model, jit_compile: bool = True) -> keras.Model:
    """Compiles a trained model again for labels: cross-entropy and accuracy.

    Its optimizer, and so its state, is kept.

    Args:
        model: a compiled `keras.Model` with a softmax output.
        jit_compile: bool, whether it compiles with XLA.

    Returns:
        `model`, for chaining.
    """
    model.compile(
        model.optimizer,
        "sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=jit_compile,
    )
    return model


def finetune_vit(
    vit: keras.Model,
    x: np.ndarray,
    y: np.ndarray,
    epochs: int,
    *,
    seed: int = 0,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    jit_compile: bool = True,
) -> keras.Model:
    """A copy of `vit` trained further, the full-model baseline of a fine-tuned `AdaViT`.

    The same recipe as `finetune_adavit` without gates or usage loss:
    pretraining plus this fine-tuning gives the full ViT the same training
    budget as the AdaViT fine-tuned from the same pretrained `vit`, which is
    left unchanged.

    Args:
        vit: a trained functional ViT, such as `pretrain_vit` returns.
        x: numpy images.
        y: integer labels `(n,)`.
        epochs: int, passes over `(x, y)`.
        seed: int, seed of the data order.
        batch_size: int.
        learning_rate: float, Adam's learning rate.
        jit_compile: bool, whether training compiles with XLA.

    Returns:
        The trained copy, compiled with `jit_compile`.

    Example:

    >>> x, y = np.zeros((4, 8, 8), "float32"), np.zeros(4, "int32")
    >>> vit = build_vision_transformer((8, 8), 10, hidden_dim=8, num_layers=2, num_heads=2)
    >>> before = vit.get_weights()
    >>> full = finetune_vit(vit, x, y, epochs=2, batch_size=2, jit_compile=False)
    >>> full is not vit, int(full.optimizer.iterations)  # 2 epochs of 2 batches
    (True, 4)
    >>> same = [np.array_equal(a, b) for a, b in zip(before, vit.get_weights())]
    >>> all(same), all(np.array_equal(a, b) for a, b in zip(before, full.get_weights()))
    (True, False)
    """
    jit_compile = check_bool("jit_compile", jit_compile)
    keras.utils.set_random_seed(seed)
    copy = keras.models.clone_model(vit)
    copy.set_weights(vit.get_weights())
    optimizer = keras.optimizers.Adam(learning_rate)
    return _fit(copy, x, y, epochs, batch_size, optimizer, jit_compile)


def _fit(model, x, y, epochs, batch_size, optimizer, jit_compile):
    """Trains `model` with `optimizer`, under XLA if `jit_compile`."""
    _compile(model, optimizer, jit_compile)
    model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0)
    return model


def _compile(
    model, optimizer, jit_compile, loss="sparse_categorical_crossentropy", metrics=("accuracy",)
):
    """Compiles `model` with `optimizer`, under XLA if `jit_compile`, and builds the optimizer."""
    metrics = metrics and list(metrics)
    model.compile(optimizer, loss, metrics=metrics, jit_compile=jit_compile)
    return build_optimizer(model)


def _gate_scales(scale):
    """The learning-rate factors of the (patch, head, block) gates, each > 0."""
    values = tuple(scale) if isinstance(scale, (list, tuple)) else (scale,) * 3
    if len(values) != 3:
        raise ValueError(
            "`gate_learning_rate_scale` must be a float > 0 or three of them "
            f"(patches, heads, blocks). Received: gate_learning_rate_scale={scale!r}"
        )
    return tuple(check_positive("gate_learning_rate_scale", value) for value in values)


def _distillation_loss(weight, temperature):
    """Cross-entropy of labels plus `weight` times the soft cross-entropy of the teacher.

    The targets are `(batch, 1 + classes)`: the label, then the teacher's
    probabilities. The logits are the logs of the probabilities, which
    differ from the network's logits by a constant per example only, which
    no softmax sees.
    """

    def loss(targets, probabilities):
        labels = ops.cast(targets[:, 0], "int32")  # (batch,)
        teacher = _log(targets[:, 1:]) / temperature  # (batch, classes)
        student = _log(probabilities) / temperature  # (batch, classes)
        soft = -ops.sum(ops.softmax(teacher) * ops.log_softmax(student), axis=-1)  # (batch,)
        hard = keras.losses.sparse_categorical_crossentropy(labels, probabilities)  # (batch,)
        return hard + weight * soft

    return loss


def _log(probabilities):
    """`log(p)` with the zeros of a saturated softmax at the smallest normal float32."""
    return ops.log(ops.maximum(ops.cast(probabilities, "float32"), np.finfo("float32").tiny))
