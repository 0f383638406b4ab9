import keras
import numpy as np
import pytest

from keras_attn.analysis import fit_linear_probe


def _data():
    rng = np.random.default_rng(0)
    labels = np.arange(30) % 3
    features = rng.normal(size=(30, 5)).astype("float32") + 2.0 * np.eye(5)[labels]
    return features, labels


def test_steps_are_the_full_batch_epochs_of_keras_fit():
    features, labels = _data()
    keras.utils.set_random_seed(0)
    kernel, bias = fit_linear_probe(features, labels, 3, steps=25, learning_rate=0.05)
    keras.utils.set_random_seed(0)
    reference = keras.Sequential([keras.Input((5,)), keras.layers.Dense(3)])
    reference.compile(
        keras.optimizers.Adam(0.05), keras.losses.SparseCategoricalCrossentropy(from_logits=True)
    )
    reference.fit(features, labels, epochs=25, batch_size=30, shuffle=False, verbose=0)
    np.testing.assert_allclose(kernel, reference.get_weights()[0], atol=1e-5)
    np.testing.assert_allclose(bias, reference.get_weights()[1], atol=1e-5)
    # One step fewer is another probe: the comparison can fail.
    keras.utils.set_random_seed(0)
    fewer = fit_linear_probe(features, labels, 3, steps=24, learning_rate=0.05)[0]
    assert np.abs(fewer - kernel).max() > 1e-3
    assert np.mean(np.argmax(features @ kernel + bias, -1) == labels) > 0.9


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"features": np.zeros((3,))}, "features"),
        ({"labels": np.zeros((4,), int)}, "labels"),
        ({"labels": np.full((30,), 3)}, r"labels.*\[0, 3\)"),
        ({"num_classes": 1}, "num_classes=1"),
        ({"steps": 0}, "steps=0"),
        ({"learning_rate": 0.0}, "learning_rate=0.0"),
    ],
)
def test_bad_arguments_name_the_argument(kwargs, match):
    features, labels = _data()
    arguments = {"features": features, "labels": labels, "num_classes": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        fit_linear_probe(**arguments)
