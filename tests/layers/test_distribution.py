import subprocess
import sys
import textwrap

import pytest

# Logical devices must be configured before TensorFlow starts, so the
# strategy runs in a fresh interpreter.
MIRRORED_FIT = textwrap.dedent(
    """
    import os
    os.environ["KERAS_BACKEND"] = "tensorflow"
    import tensorflow as tf
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )
    import keras
    import numpy as np
    from keras_attn.layers import MultiHeadSelfAttention

    strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
    assert strategy.num_replicas_in_sync == 2
    with strategy.scope():
        inputs = keras.Input(shape=(6, 8))
        x = MultiHeadSelfAttention(num_heads=2, key_dim=4, attention_pattern="causal")(inputs)
        outputs = keras.layers.Dense(1)(keras.layers.GlobalAveragePooling1D()(x))
        model = keras.Model(inputs, outputs)
        # XLA fails with variables on two logical devices (known upstream).
        model.compile(optimizer="adam", loss="mse", jit_compile=False)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(32, 6, 8)).astype("float32")
    y = x.mean(axis=(1, 2))[:, None]
    history = model.fit(x, y, epochs=3, batch_size=8, verbose=0)
    losses = history.history["loss"]
    assert losses[-1] < losses[0], losses
    variable = model.layers[1].query_dense.kernel
    assert len(variable.value.values) == 2, "weights are not mirrored"
    print("MIRRORED_OK", losses)
    """
)


@pytest.mark.skipif(
    __import__("keras").backend.backend() != "tensorflow",
    reason="tf.distribute runs on the TensorFlow backend.",
)
def test_fit_under_mirrored_strategy_on_two_logical_cpus():
    result = subprocess.run(
        [sys.executable, "-c", MIRRORED_FIT], capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "MIRRORED_OK" in result.stdout
