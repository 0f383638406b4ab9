"""fit_with_test_curve: one curve point per epoch, the final accuracy on the whole test set."""

import keras
import numpy as np

from keras_attn.datasets import AugmentedImages
from keras_attn.utils.training import fit_with_test_curve


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
