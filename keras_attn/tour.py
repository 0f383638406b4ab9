"""`keras-attn tour`: train a small attention classifier, export it, reload it.

Reads Fashion-MNIST from the Debian package `dataset-fashion-mnist`, treats
each image as a sequence of 28 rows, trains a one-block transformer built
from the library's layers with XLA, and checks that the exported SavedModel
serves the same predictions. It runs on the TensorFlow backend, and on JAX
where TensorFlow is installed: Keras exports a JAX model through TensorFlow.
"""

import time

import keras
import numpy as np

from keras_attn._optional import is_installed
from keras_attn.datasets import load_fashion_mnist
from keras_attn.kernels import runtime
from keras_attn.layers import MultiHeadSelfAttention, PositionEmbedding
from keras_attn.utils import finish_run, is_small_run
from keras_attn.utils.training import build_optimizer
from keras_attn.utils.validation import int_option, output_folder


def add_arguments(parser):
    parser.add_argument("--epochs", type=int_option(), default=3, help="Training epochs.")
    parser.add_argument(
        "--train-size", type=int_option(1, 60000), default=12000, help="Training images used."
    )
    parser.add_argument(
        "--out", type=output_folder, default="runs/tour", help="Folder for results and the model."
    )
    parser.add_argument("--seed", type=int_option(0), default=0, help="Random seed.")


def build_row_classifier(num_classes=10, hidden_dim=64, num_heads=4, rows=28, columns=28):
    """A one-block transformer that reads an image row by row."""
    images = keras.Input(shape=(rows, columns), name="images")
    x = keras.layers.Rescaling(1.0 / 255.0)(images)
    x = keras.layers.Dense(hidden_dim, name="row_embedding")(x)  # (batch, rows, hidden_dim)
    x = PositionEmbedding(max_sequence_length=rows)(x)
    attended = MultiHeadSelfAttention(num_heads, hidden_dim // num_heads, dropout=0.1)(x)
    x = keras.layers.LayerNormalization()(x + attended)
    hidden = keras.layers.Dense(2 * hidden_dim, activation="gelu")(x)
    x = keras.layers.LayerNormalization()(x + keras.layers.Dense(hidden_dim)(hidden))
    x = keras.layers.GlobalAveragePooling1D()(x)  # (batch, hidden_dim)
    outputs = keras.layers.Dense(num_classes, activation="softmax", name="classes")(x)
    return keras.Model(images, outputs, name="row_transformer")


def export_refusal(backend):
    """Why the tour cannot export a SavedModel on `backend`, or `None` if it can.

    Keras exports a SavedModel from TensorFlow, and from JAX through
    TensorFlow, so JAX needs TensorFlow installed too; the tour does not
    export from torch.

    Args:
        backend: a Keras backend name, e.g. `keras.backend.backend()`.

    Returns:
        The message to print instead of running, or `None`.
    """
    if backend not in ("tensorflow", "jax"):
        return (
            f"The tour exports a SavedModel, which it does from TensorFlow or JAX only: run it "
            f"with KERAS_BACKEND=tensorflow or jax. Received: KERAS_BACKEND={backend!r}"
        )
    if backend == "jax" and not is_installed("tensorflow"):
        return (
            "The tour exports a SavedModel, which needs TensorFlow on the JAX backend too: "
            'install it with `pip install "keras-attn[tensorflow]"`.'
        )
    return None


def run(args):
    refusal = export_refusal(keras.backend.backend())
    if refusal:
        raise SystemExit(refusal)

    started_at = time.time()
    keras.utils.set_random_seed(args.seed)
    # Small: 1,152 training and 128 validation images and 1,024 test images, all
    # in whole batches of 128, so each XLA function compiles for one shape.
    train_size, epochs = (1280, 1) if is_small_run() else (args.train_size, args.epochs)
    test_size = 1024 if is_small_run() else 10000
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist()
    x_train, y_train = x_train[:train_size].astype("float32"), y_train[:train_size]
    x_test, y_test = x_test[:test_size].astype("float32"), y_test[:test_size]

    model = build_row_classifier()
    model.compile(
        optimizer=keras.optimizers.Adam(2e-3),
        loss="sparse_categorical_crossentropy",
        metrics=["accuracy"],
        jit_compile=True,
    )
    print(f"Training on {train_size} Fashion-MNIST images for {epochs} epochs (XLA).")
    start = time.perf_counter()
    build_optimizer(model)
    history = model.fit(x_train, y_train, epochs=epochs, batch_size=128, validation_split=0.1)
    train_seconds = time.perf_counter() - start
    _, accuracy = model.evaluate(x_test, y_test, batch_size=128, verbose=0)
    print(f"Test accuracy on {test_size} images: {accuracy:.4f} (XLA on: {model.jit_compile})")

    export_dir = f"{args.out}/saved_model"
    model.export(export_dir, format="tf_saved_model", verbose=False)
    reloaded = runtime.load_saved_model(export_dir)
    served = reloaded.serve(x_test[:256]).numpy()
    # A direct call: no predict function to compile.
    predicted = keras.ops.convert_to_numpy(model(x_test[:256], training=False))
    max_difference = float(np.abs(served - predicted).max())
    print(f"SavedModel reloaded from {export_dir}; max prediction difference {max_difference:.2e}")

    results = {
        "train_size": train_size,
        "epochs": epochs,
        "test_size": test_size,
        "test_accuracy": float(accuracy),
        "jit_compile": bool(model.jit_compile),
        "train_seconds": train_seconds,
        "saved_model_max_difference": max_difference,
        "history": history.history,
    }
    setting = "small" if is_small_run() else "full"
    figure = _learning_curves(history.history)
    finish_run(args.out, "tour", results, figure, started_at=started_at, setting=setting)
    return results


def _learning_curves(history):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, axis = plt.subplots(figsize=(5, 3.5))
    epochs = np.arange(1, len(history["accuracy"]) + 1)
    axis.plot(epochs, history["accuracy"], marker="o", label="train")
    axis.plot(epochs, history["val_accuracy"], marker="o", label="validation")
    axis.set(xlabel="epoch", ylabel="accuracy", title="Row transformer on Fashion-MNIST")
    axis.legend()
    return figure
