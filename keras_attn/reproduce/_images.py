"""What the image-classification reproductions share: their data, training and comparison.

Each trains small vision transformers on standardized images with the recipe
of `keras_attn.utils.training` (light augmentation, AdamW with a warm-up and
a cosine decay), measures a test-accuracy curve, and compares two models by
their final accuracies on paired seeds.
"""

from keras_attn.datasets import AugmentedImages
from keras_attn.reproduce._run import mean_and_std
from keras_attn.utils.training import LIGHT_AUGMENTATION, fit_with_test_curve


def standardized_subsets(splits, train_size, test_size):
    """The first images of each split, scaled to zero mean and unit variance.

    Args:
        splits: `((x_train, y_train), (x_test, y_test))` with uint8 images,
            as the image loaders of `keras_attn.datasets` return.
        train_size: int, training images kept.
        test_size: int, test images kept.

    Returns:
        `(x_train, y_train, x_test, y_test)`, float32 images in their loader
        shape, both scaled by the mean and standard deviation of the kept
        training images.
    """
    (x_train, y_train), (x_test, y_test) = splits
    x_train = x_train[:train_size].astype("float32") / 255.0
    x_test = x_test[:test_size].astype("float32") / 255.0
    mean, std = x_train.mean(), x_train.std()
    return (x_train - mean) / std, y_train[:train_size], (x_test - mean) / std, y_test[:test_size]


def fit_augmented(model, data, batch_size, steps, evaluations, curve_test_size, seed):
    """Trains a compiled classifier on lightly augmented batches of `data`.

    Args:
        model: a compiled classifier with an `"accuracy"` metric.
        data: `(x_train, y_train, x_test, y_test)`, from `standardized_subsets`.
        batch_size: int, images per optimizer step.
        steps: int, optimizer steps, a multiple of `evaluations`.
        evaluations: int, the points of the test-accuracy curve.
        curve_test_size: int, the first test images that the curve measures.
        seed: int, seed of the batches and their augmentation.

    Returns:
        The dict of `keras_attn.utils.training.fit_with_test_curve`: the
        final accuracy on all test images and the curves.
    """
    x_train, y_train, x_test, y_test = data
    batches = AugmentedImages(
        x_train,
        y_train,
        batch_size,
        steps_per_epoch=steps // evaluations,
        seed=seed,
        **LIGHT_AUGMENTATION,
    )
    curve_test = (x_test[:curve_test_size], y_test[:curve_test_size])
    return fit_with_test_curve(model, batches, evaluations, curve_test, (x_test, y_test))


def paired_difference(values, baseline):
    """`values - baseline` per seed (`per_seed`), with its `mean_and_std`."""
    per_seed = [a - b for a, b in zip(values, baseline, strict=True)]
    return {**mean_and_std(per_seed), "per_seed": per_seed}
