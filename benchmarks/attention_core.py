"""Forward+backward time of the attention core against Keras MultiHeadAttention.

Both layers get the same shapes and the same weights, run under XLA
(`tf.function(jit_compile=True)`), and are timed in the same process. Prints
one row per sequence length with the ratio core / Keras (below 1: faster).

    python benchmarks/attention_core.py [--lengths 128 256 512 1024 2048]
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn.layers import MultiHeadSelfAttention  # noqa: E402


def forward_backward(call, variables):
    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(call(x)))
        return tape.gradient(loss, variables)

    return step


def seconds_per_step(step, x, repeats):
    step(x)  # compile
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        tf.nest.map_structure(lambda t: t.numpy(), step(x))
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    key_dim = args.dim // args.heads
    print(f"batch={args.batch} dim={args.dim} heads={args.heads}, XLA, median of {args.repeats}")
    print(f"{'L':>6} {'keras MHA (ms)':>15} {'core (ms)':>10} {'core/keras':>11}")
    for length in args.lengths:
        x = tf.random.normal((args.batch, length, args.dim))
        core = MultiHeadSelfAttention(args.heads, key_dim)
        baseline = keras.layers.MultiHeadAttention(args.heads, key_dim)
        core(x)
        baseline(x, x)
        baseline.set_weights(core.get_weights())
        core_step = forward_backward(core, core.trainable_variables)
        baseline_step = forward_backward(
            lambda v, layer=baseline: layer(v, v), baseline.trainable_variables
        )
        core_time = seconds_per_step(core_step, x, args.repeats)
        baseline_time = seconds_per_step(baseline_step, x, args.repeats)
        print(
            f"{length:>6} {baseline_time * 1e3:>15.2f} {core_time * 1e3:>10.2f} "
            f"{core_time / baseline_time:>11.2f}"
        )


if __name__ == "__main__":
    main()
