"""Light image augmentation as a `keras.utils.PyDataset`."""

import math

import keras
import numpy as np

from keras_attn._typing import Tensor
from keras_attn.utils.validation import check_bool, check_int


class AugmentedImages(keras.utils.PyDataset):
    """Shuffled batches of randomly shifted and flipped images, reproducible from a seed.

    Each image of a batch is shifted by up to `max_shift` pixels along each
    axis (the border pixels are repeated into the gap) and, with
    `flip=True`, mirrored left-right with probability 1/2. An epoch is
    `steps_per_epoch` batches drawn from a stream of shuffled passes over
    the data, so an epoch may be shorter or longer than one pass (a small
    training set can be trained for a fixed number of steps and evaluated
    every `steps_per_epoch` steps). The order and the augmentation come
    from `seed` alone: two datasets with the same arguments yield the same
    batches, which pairs runs that differ only in the model.

    Args:
        images: `(n, height, width)` or `(n, height, width, channels)` array.
        labels: `(n,)` array.
        batch_size: int, images per batch.
        steps_per_epoch: int, batches per epoch. Defaults to one pass,
            `ceil(n / batch_size)`.
        max_shift: int, largest shift in pixels; 0 turns shifting off.
        flip: bool, whether to mirror half of the images left-right.
        seed: int, seed of the order and of the augmentation.
        **kwargs: `keras.utils.PyDataset` arguments.

    Example:

    >>> images = np.arange(4 * 3 * 3, dtype="float32").reshape(4, 3, 3)
    >>> data = AugmentedImages(images, np.arange(4), batch_size=2, max_shift=1)
    >>> x, y = data[0]
    >>> x.shape, y.shape, len(data)
    ((2, 3, 3), (2,), 2)
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor,
        batch_size: int = 128,
        steps_per_epoch: int | None = None,
        max_shift: int = 2,
        flip: bool = True,
        seed: int = 0,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.images = np.asarray(images)
        self.labels = np.asarray(labels)
        if self.images.ndim not in (3, 4) or len(self.images) != len(self.labels):
            raise ValueError(
                "`images` must be `(n, height, width[, channels])` with one label each. "
                f"Received: images.shape={self.images.shape}, labels.shape={self.labels.shape}"
            )
        self.batch_size = check_int("batch_size", batch_size)
        default_steps = math.ceil(len(self.images) / self.batch_size)
        self.steps_per_epoch = check_int("steps_per_epoch", steps_per_epoch or default_steps)
        self.max_shift = check_int("max_shift", max_shift, minimum=0)
        if self.max_shift >= min(self.images.shape[1:3]):
            raise ValueError(
                f"`max_shift` must be smaller than the image. Received: max_shift={max_shift}"
            )
        self.flip = check_bool("flip", flip)
        self._rng = np.random.default_rng(check_int("seed", seed, minimum=0))
        self._pending = np.zeros((0,), dtype="int64")
        self._draw_epoch()

    def __len__(self):
        return self.steps_per_epoch

    def __getitem__(self, index):
        rows = self._rows[index]  # (batch,)
        images = self.images[rows]
        if self.max_shift:
            images = self._shifted(images, self._shifts[index])
        if self.flip:
            mirrored = self._mirrored[index]  # (batch,)
            images[mirrored] = images[mirrored, :, ::-1]
        return images, self.labels[rows]

    def on_epoch_end(self) -> None:
        self._draw_epoch()

    def _draw_epoch(self):
        """Draws the next epoch's rows, shifts and flips from the seeded stream."""
        needed = self.steps_per_epoch * self.batch_size
        while len(self._pending) < needed:
            self._pending = np.concatenate([self._pending, self._rng.permutation(len(self.images))])
        rows, self._pending = self._pending[:needed], self._pending[needed:]
        self._rows = rows.reshape(self.steps_per_epoch, self.batch_size)  # (steps, batch)
        shift = self.max_shift
        self._shifts = self._rng.integers(-shift, shift + 1, size=(*self._rows.shape, 2))
        self._mirrored = self._rng.random(self._rows.shape) < 0.5  # (steps, batch)

    def _shifted(self, images, shifts):
        """Each image moved by its `(down, right)` shift, border pixels repeated."""
        pad = self.max_shift
        widths = [(0, 0), (pad, pad), (pad, pad)] + [(0, 0)] * (images.ndim - 3)
        padded = np.pad(images, widths, mode="edge")
        height, width = images.shape[1:3]
        starts = pad - shifts  # (batch, 2): a shift of +1 moves the content down/right
        return np.stack(
            [
                image[top : top + height, left : left + width]
                for image, (top, left) in zip(padded, starts, strict=True)
            ]
        )
