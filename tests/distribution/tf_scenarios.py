"""Data-parallel equality under `tf.distribute.MirroredStrategy` on 2 logical CPUs.

Run in a fresh interpreter (logical devices are fixed when TensorFlow starts):

    PYTHONPATH=. python tests/distribution/tf_scenarios.py

Trains a ViT for a few steps on one device and mirrored on two, with the
same global batch, once with XLA (`jit_compile=True`) and once without,
and prints one line `RESULT {...}` with the largest differences, or the
error a configuration raised.
"""

import json
import os
import re

os.environ["KERAS_BACKEND"] = "tensorflow"
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

CPU = tf.config.list_physical_devices("CPU")[0]
tf.config.set_logical_device_configuration(CPU, [tf.config.LogicalDeviceConfiguration()] * 2)

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.models import build_vision_transformer  # noqa: E402

GLOBAL_BATCH = 8
STEPS = 3


def vit():
    return build_vision_transformer(
        (8, 8, 1), 3, patch_size=4, hidden_dim=8, num_layers=1, num_heads=2
    )


def data():
    rng = np.random.default_rng(0)
    images = rng.normal(size=(GLOBAL_BATCH, 8, 8, 1)).astype("float32")
    labels = rng.integers(0, 3, size=(GLOBAL_BATCH,)).astype("int32")
    # The same batch every step, as in the JAX scenarios: the loss must fall.
    return np.tile(images, (STEPS, 1, 1, 1)), np.tile(labels, STEPS)


class StepLosses(keras.callbacks.Callback):
    """Loss of every step (Keras reports the running mean; this undoes it)."""

    def on_train_begin(self, logs=None):
        self.means = []

    def on_train_batch_end(self, batch, logs=None):
        self.means.append(float(logs["loss"]))

    def losses(self):
        totals = [mean * (step + 1) for step, mean in enumerate(self.means)]
        return [totals[0]] + [b - a for a, b in zip(totals, totals[1:], strict=False)]


def fit(weights, jit_compile, strategy=None):
    scope = strategy.scope() if strategy else tf.device("/cpu:0")
    with scope:
        model = vit()
        model.set_weights(weights)
        model.compile(
            optimizer=keras.optimizers.SGD(0.05),
            loss="sparse_categorical_crossentropy",
            jit_compile=jit_compile,
        )
    images, labels = data()
    callback = StepLosses()
    model.fit(
        images,
        labels,
        batch_size=GLOBAL_BATCH,
        epochs=1,
        shuffle=False,
        verbose=0,
        callbacks=[callback],
    )
    mirrored = strategy is not None and len(model.weights[0].value.values) == 2
    return callback.losses(), [np.asarray(w) for w in model.get_weights()], mirrored


def upstream_error(error):
    """The exception's type and the lines of its message that say what failed."""
    # Without the "(defined @ <file>:<line>)" pointers into the installed packages.
    lines = [re.sub(r" \(defined @ [^)]*\)", "", line.strip()) for line in str(error).splitlines()]
    cause = [line for line in lines if "Trying to access" in line or "known_issues" in line]
    return " ".join([f"{type(error).__name__}:", *(cause or lines[:3])])


def compare(weights, jit_compile):
    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    try:
        parallel = fit(weights, jit_compile, strategy)
    except Exception as error:  # noqa: BLE001 - the upstream error is the result
        return {"error": upstream_error(error)}
    single = fit(weights, jit_compile)
    return {
        "single_device_losses": single[0],
        "mirrored_losses": parallel[0],
        "loss_max_abs_difference": float(np.max(np.abs(np.subtract(single[0], parallel[0])))),
        "weight_max_abs_difference": max(
            float(np.max(np.abs(a - b))) for a, b in zip(single[1], parallel[1], strict=True)
        ),
        "weights_mirrored_on_2_devices": parallel[2],
        "error": None,
    }


def main():
    keras.utils.set_random_seed(0)
    weights = vit().get_weights()
    results = {
        "xla": compare(weights, jit_compile=True),
        "no_xla": compare(weights, jit_compile=False),
    }
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
