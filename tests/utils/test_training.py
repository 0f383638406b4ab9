"""fit_with_test_curve: one curve point per epoch, the final accuracy on the whole test set."""

import keras
import numpy as np

from keras_attn.datasets import AugmentedImages
from keras_attn.utils.training import WARMUP_COSINE_ADAMW, fit_with_test_curve, warmup_cosine_adamw


def test_one_curve_point_per_epoch_and_the_final_accuracy_on_the_test_set():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(32, 6, 6, 1)).astype("float32")
    labels = (images.mean(axis=(1, 2, 3)) > 0).astype("int32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential(
        [
            keras.Input((6, 6, 1)),
            keras.layers.Flatten(),
            keras.layers.Dense(2, activation="softmax"),
        ]
    )
    model.compile("sgd", "sparse_categorical_crossentropy", metrics=["accuracy"])
    batches = AugmentedImages(images, labels, 8, steps_per_epoch=2, max_shift=0, flip=False)
    curve, test = (images[:8], labels[:8]), (images[8:], labels[8:])
    run = fit_with_test_curve(model, batches, 3, curve, test)
    assert len(run["test_accuracy"]) == len(run["train_accuracy"]) == 3
    assert run["seconds"] > 0
    # The curve reads the curve images, the final figure the test images.
    predicted = model.predict(images, verbose=0).argmax(-1)
    assert run["test_accuracy"][-1] == np.float32(np.mean(predicted[:8] == labels[:8]))
    assert run["final_test_accuracy"] == np.float32(np.mean(predicted[8:] == labels[8:]))


def test_warmup_cosine_adamw_rises_over_a_tenth_of_the_steps_then_decays_to_zero():
    optimizer = warmup_cosine_adamw(100)
    rates = {}
    for step in (0, 5, 10, 55, 100):
        optimizer.iterations.assign(step)
        rates[step] = float(optimizer.learning_rate)
    peak = WARMUP_COSINE_ADAMW["learning_rate"]
    np.testing.assert_allclose(
        [rates[0], rates[5], rates[10], rates[55], rates[100]],
        [0.0, peak / 2, peak, peak / 2, 0.0],  # linear warm-up, then half a cosine over 90 steps
        atol=1e-9,
    )
    assert optimizer.weight_decay == WARMUP_COSINE_ADAMW["weight_decay"]
