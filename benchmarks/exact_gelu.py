"""Training speed of the blocks' exact GELU against Keras' own, on TensorFlow.

The blocks write their exact GELU on TensorFlow as `x (1 + erf(x / √2)) / 2`
so that tf2onnx exports it (Keras' writes `erfc`, which ONNX has no op for).
This times the training step of two `TransformerBlock`s at SASRec's size
(batch 256, length 50, hidden 64, feed-forward 256, causal attention), once
with `activation="gelu"` (the blocks' GELU) and once with Keras' exact GELU
passed as a function (which the blocks keep), with and without XLA: each
round times every model and XLA choice once (`--steps` steps after a
compiled first one), `--rounds` interleaved rounds, and reports the median
steps per second and the ratio of the medians, the blocks' GELU over Keras'.

    python benchmarks/exact_gelu.py [--steps 30] [--rounds 9] \
        [--output results/benchmarks/exact_gelu.json]
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.layers import TransformerBlock  # noqa: E402
from keras_attn.utils import write_benchmark  # noqa: E402

BATCH, LENGTH, DIM, HIDDEN = 256, 50, 64, 256


def keras_exact_gelu(x):
    """Keras' exact GELU (on TensorFlow, `erfc`), as a function the blocks keep."""
    return keras.activations.gelu(x, approximate=False)


ACTIVATIONS = {"blocks' GELU (erf)": "gelu", "Keras' GELU (erfc)": keras_exact_gelu}


def build_model(activation, jit_compile):
    """Two causal `TransformerBlock`s and a regression head, compiled."""
    inputs = keras.Input((LENGTH, DIM))
    x = inputs
    for _ in range(2):
        x = TransformerBlock(
            num_heads=2,
            intermediate_dim=HIDDEN,
            activation=activation,
            attention_kwargs={"attention_pattern": "causal"},
        )(x)
    model = keras.Model(inputs, keras.layers.Dense(1)(x))
    model.compile(optimizer="adam", loss="mse", jit_compile=jit_compile)
    return model


def steps_per_second(model, data, targets, steps):
    """Training steps per second over `steps` steps, after one that compiles."""
    model.train_on_batch(data, targets)
    start = time.perf_counter()
    for _ in range(steps):
        model.train_on_batch(data, targets)
    return steps / (time.perf_counter() - start)


def measure(steps, rounds):
    """Rows of median steps/s per activation and XLA choice, with the ratio of the medians."""
    rng = np.random.default_rng(0)
    data = rng.normal(size=(BATCH, LENGTH, DIM)).astype("float32")
    targets = rng.normal(size=(BATCH, LENGTH, 1)).astype("float32")
    speeds = {}
    for jit_compile in (False, True):
        for name, activation in ACTIVATIONS.items():
            keras.utils.set_random_seed(0)
            speeds[name, jit_compile] = (build_model(activation, jit_compile), [])
    for round_index in range(rounds):
        for (name, jit_compile), (model, values) in speeds.items():
            values.append(steps_per_second(model, data, targets, steps))
            print(
                f"round {round_index + 1}/{rounds} {name} jit_compile={jit_compile}: "
                f"{values[-1]:.1f} steps/s",
                flush=True,
            )
    rows = []
    for jit_compile in (False, True):
        ours, theirs = (speeds[name, jit_compile][1] for name in ACTIVATIONS)
        ratio = float(np.median(ours) / np.median(theirs))
        print(f"jit_compile={jit_compile}: blocks' GELU / Keras' GELU {ratio:.3f}")
        rows.append(
            {
                "jit_compile": jit_compile,
                "steps_per_s": {
                    name: float(np.median(speeds[name, jit_compile][1])) for name in ACTIVATIONS
                },
                "steps_per_s_per_round": {
                    name: speeds[name, jit_compile][1] for name in ACTIVATIONS
                },
                "ratio": ratio,
            }
        )
    return rows


def main(argv=None):
    started_at = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=9, help="interleaved rounds")
    parser.add_argument("--output", default=None, help="JSON file for the results")
    args = parser.parse_args(argv)
    rows = measure(args.steps, args.rounds)
    if args.output:
        config = {
            "batch": BATCH,
            "length": LENGTH,
            "dim": DIM,
            "intermediate_dim": HIDDEN,
            "steps": args.steps,
            "rounds": args.rounds,
        }
        write_benchmark(args.output, {"config": config, "rows": rows}, started_at=started_at)


if __name__ == "__main__":
    main()
