"""AdaViT's training recipe: a ViT pretrained, then fine-tuned with and without gates."""

from collections.abc import Sequence
from typing import Any

import keras
import numpy as np

from keras_attn.models.adavit.model import AdaViT
from keras_attn.models.vision_transformer import build_vision_transformer
from keras_attn.utils.training import build_optimizer


def pretrain_vit(
    x: np.ndarray,
    y: np.ndarray,
    num_classes: int,
    epochs: int,
    *,
    seed: int = 0,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
    **vit: Any,
) -> keras.Model:
    """A ViT classifier trained from scratch, the backbone to fine-tune as an `AdaViT`.

    Builds `build_vision_transformer(x.shape[1:], num_classes, **vit)` under
    `seed` and trains it with Adam, sparse categorical cross-entropy and XLA.

    Args:
        x: numpy images, `(n, ...)` as the ViT's input.
        y: integer labels `(n,)`.
        num_classes: int, the classes of the softmax head.
        epochs: int, passes over `(x, y)`.
        seed: int, seed of the weights and the data order.
        batch_size: int.
        learning_rate: float, Adam's learning rate.
        **vit: arguments of `build_vision_transformer`, such as `patch_size`.

    Returns:
        The trained functional ViT.

    Example:

    >>> x, y = np.zeros((8, 28, 28), "float32"), np.zeros(8, "int32")
    >>> vit = pretrain_vit(x, y, 10, epochs=2, batch_size=4, patch_size=7, hidden_dim=16,
    ...                    num_layers=2)
    >>> vit.output.shape, int(vit.optimizer.iterations)  # 2 epochs of 2 batches
    ((None, 10), 4)
    """
    keras.utils.set_random_seed(seed)
    vit_model = build_vision_transformer(x.shape[1:], num_classes, **vit)
    return _fit(vit_model, x, y, epochs, batch_size, learning_rate)


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
    **adavit: Any,
) -> AdaViT:
    """An `AdaViT` on a copy of `vit`, gates and backbone fine-tuned at a usage target.

    `vit` itself is left unchanged: the AdaViT wraps a clone with its
    weights. Trained with Adam, sparse categorical cross-entropy plus the
    usage loss, and XLA.

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
        **adavit: further `AdaViT` arguments, such as `gate_bias`.

    Returns:
        The fine-tuned `AdaViT`, compiled with `jit_compile=True`.
    """
    keras.utils.set_random_seed(seed)
    backbone = keras.models.clone_model(vit)
    backbone.set_weights(vit.get_weights())
    model = AdaViT(backbone, target_usage=target_usage, seed=seed, **adavit)
    model.build(x.shape)  # its gates, so that the optimizer can be built before `fit`
    return _fit(model, x, y, epochs, batch_size, learning_rate)


def finetune_vit(
    vit: keras.Model,
    x: np.ndarray,
    y: np.ndarray,
    epochs: int,
    *,
    seed: int = 0,
    batch_size: int = 128,
    learning_rate: float = 1e-3,
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

    Returns:
        The trained copy, compiled with `jit_compile=True`.

    Example:

    >>> x, y = np.zeros((8, 28, 28), "float32"), np.zeros(8, "int32")
    >>> vit = build_vision_transformer((28, 28), 10, patch_size=7, hidden_dim=16, num_layers=2)
    >>> before = vit.get_weights()
    >>> full = finetune_vit(vit, x, y, epochs=2, batch_size=4)
    >>> full is not vit, int(full.optimizer.iterations)  # 2 epochs of 2 batches
    (True, 4)
    >>> same = [np.array_equal(a, b) for a, b in zip(before, vit.get_weights())]
    >>> all(same), all(np.array_equal(a, b) for a, b in zip(before, full.get_weights()))
    (True, False)
    """
    keras.utils.set_random_seed(seed)
    copy = keras.models.clone_model(vit)
    copy.set_weights(vit.get_weights())
    return _fit(copy, x, y, epochs, batch_size, learning_rate)


def _fit(model, x, y, epochs, batch_size, learning_rate):
    model.compile(
        keras.optimizers.Adam(learning_rate),
        "sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=True,
    )
    build_optimizer(model)
    model.fit(x, y, epochs=epochs, batch_size=batch_size, verbose=0)
    return model
