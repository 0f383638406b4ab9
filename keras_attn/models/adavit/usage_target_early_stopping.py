"""Early stopping of AdaViT fine-tuning: a validation plateau among the epochs at target."""

from typing import Any

import numpy as np

from keras_attn.models.adavit.model import AdaViT
from keras_attn.utils.best_epoch_stopping import BestEpochStopping
from keras_attn.utils.training import top1_accuracy
from keras_attn.utils.validation import check_float, check_int


class UsageTargetEarlyStopping(BestEpochStopping):
    """Stops AdaViT fine-tuning once its accuracy at the usage target stops rising.

    After each epoch it runs the model's inference decisions
    (`AdaViT.decide`) and predictions on the validation images, and adds to
    the epoch's logs `"val_accuracy"` and, per statistic of `AdaViT.usage`,
    `"val_usage_<name>"`, with `"val_usage_blocks"` (the mean of attention
    and MLP usage) and `"val_at_target"` (1.0 or 0.0). An epoch is *at
    target* when `AdaViT.usage_at_target` holds for its usage: the official
    token, head and block usage each within `tolerance` of the model's
    target. Only epochs at target count: training stops once `patience` of
    them have passed without a higher validation accuracy than the best of
    them, and at the end of training the model gets that best epoch's
    weights. When no epoch reached the target, the weights are those of
    the last epoch and `best_epoch` is `None`.

    The usage is that of the model's own inference rule (see
    `tempered_inference`). This is the stopping rule of the converged
    reproduction (`keras-attn reproduce adavit-converged`, docs/adavit.md).

    Args:
        x: numpy validation images.
        y: integer validation labels `(n,)`.
        patience: int >= 1, epochs at target without improvement before
            stopping.
        tolerance: float >= 0, how far each usage may lie from its target.
        batch_size: int, images per call of the decisions and predictions.

    Attributes:
        best_epoch: 0-based epoch of the best accuracy at target, or `None`.
        best_score: its validation accuracy, `-inf` until an epoch is at
            target.
        wait: epochs at target since the best one.

    Example:

    >>> vit = build_vision_transformer((8, 8), 10, hidden_dim=8, num_layers=2, num_heads=2)
    >>> x, y = np.zeros((8, 8, 8), "float32"), np.zeros(8, "int32")
    >>> stopping = UsageTargetEarlyStopping(x, y, patience=2, tolerance=1.0)
    >>> model = finetune_adavit(vit, x, y, 0.5, epochs=5, batch_size=4, callbacks=[stopping],
    ...                         jit_compile=False)
    >>> stopping.best_epoch, stopping.wait  # all at target; the accuracy never rises again
    (0, 2)
    """

    def __init__(
        self,
        x: np.ndarray,
        y: np.ndarray,
        patience: int = 15,
        tolerance: float = 0.05,
        batch_size: int = 256,
    ):
        super().__init__(patience)
        if len(x) != len(y) or len(x) == 0:
            raise ValueError(
                "`x` and `y` must hold the same positive number of examples. "
                f"Received: x with {len(x)} and y with {len(y)}"
            )
        self.x, self.y = x, np.asarray(y)
        self.tolerance = check_float("tolerance", tolerance, low=0.0)
        self.batch_size = check_int("batch_size", batch_size)

    def on_train_begin(self, logs: dict[str, Any] | None = None) -> None:
        if not isinstance(self.model, AdaViT):
            raise ValueError(
                "UsageTargetEarlyStopping watches an AdaViT's usage. "
                f"Received: model of type {type(self.model).__name__}"
            )
        super().on_train_begin(logs)

    def on_epoch_end(self, epoch: int, logs: dict[str, Any] | None = None) -> None:
        usage = self.model.usage(self._decisions())
        accuracy = self._accuracy()
        at_target = self.model.usage_at_target(usage, self.tolerance)
        if logs is not None:
            logs["val_accuracy"] = accuracy
            logs.update({f"val_usage_{name}": value for name, value in usage.items()})
            logs["val_usage_blocks"] = (usage["attention"] + usage["mlp"]) / 2
            logs["val_at_target"] = float(at_target)
        if at_target:
            self.count_epoch(epoch, accuracy)

    def _decisions(self):
        """`AdaViT.decide` on the validation images, batch by batch."""
        starts = range(0, len(self.x), self.batch_size)
        parts = [self.model.decide(self.x[i : i + self.batch_size]) for i in starts]
        return {key: np.concatenate([part[key] for part in parts]) for key in parts[0]}

    def _accuracy(self):
        probabilities = self.model.predict(self.x, batch_size=self.batch_size, verbose=0)
        return top1_accuracy(probabilities, self.y)
