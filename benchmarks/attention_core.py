"""Forward+backward time of the attention core against Keras MultiHeadAttention.

Both layers get the same shapes and the same weights, run under XLA
(`tf.function(jit_compile=True)`), and are timed in the same process, the
two steps alternating so that both see the same machine load. Prints one row
per pattern and sequence length with the ratio core / Keras (below 1:
faster) and writes them to `--output` as JSON. `"causal"` compares the core's
causal pattern with `MultiHeadAttention(..., use_causal_mask=True)`.

    python benchmarks/attention_core.py [--lengths 128 256 512 1024 2048]
"""

import argparse
import functools
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn.layers import MultiHeadSelfAttention  # noqa: E402
from keras_attn.utils import median_seconds, write_benchmark  # noqa: E402


def forward_backward(call, variables):
    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(call(x)))
        return tape.gradient(loss, variables)

    return step


def main():
    started_at = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 256, 512, 1024, 2048])
    parser.add_argument(
        "--patterns", nargs="+", choices=("dense", "causal"), default=["dense", "causal"]
    )
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5, help="fewest timing rounds")
    parser.add_argument(
        "--min-seconds", type=float, default=2.0, help="least total time per step and length"
    )
    parser.add_argument("--output", default="results/benchmarks/attention_core.json")
    args = parser.parse_args()
    key_dim = args.dim // args.heads
    print(
        f"batch={args.batch} dim={args.dim} heads={args.heads}, XLA, median of interleaved rounds"
    )
    print(f"{'pattern':>7} {'L':>6} {'keras MHA (ms)':>15} {'core (ms)':>10} {'core/keras':>11}")
    rows = []
    for pattern in args.patterns:
        for length in args.lengths:
            x = tf.random.normal((args.batch, length, args.dim))
            core = MultiHeadSelfAttention(args.heads, key_dim, attention_pattern=pattern)
            baseline = keras.layers.MultiHeadAttention(args.heads, key_dim)
            core(x)
            baseline(x, x)
            baseline.set_weights(core.get_weights())
            core_step = forward_backward(core, core.trainable_variables)
            baseline_step = forward_backward(
                lambda v, layer=baseline, c=pattern == "causal": layer(v, v, use_causal_mask=c),
                baseline.trainable_variables,
            )
            baseline_time, core_time = median_seconds(
                [functools.partial(baseline_step, x), functools.partial(core_step, x)],
                args.repeats,
                min_seconds=args.min_seconds,
            )
            ratio = core_time / baseline_time
            rows.append(
                {
                    "pattern": pattern,
                    "length": length,
                    "keras_seconds": baseline_time,
                    "core_seconds": core_time,
                    "ratio": ratio,
                }
            )
            print(
                f"{pattern:>7} {length:>6} {baseline_time * 1e3:>15.2f} {core_time * 1e3:>10.2f} "
                f"{ratio:>11.2f}",
                flush=True,
            )
    names = ("batch", "dim", "heads", "repeats", "min_seconds")
    settings = {name: getattr(args, name) for name in names}
    write_benchmark(args.output, {"settings": settings, "rows": rows}, started_at=started_at)


if __name__ == "__main__":
    main()
