"""Forward+backward time of BSARec's FourierFilter against self-attention.

The filter (an rfft/irfft pair along the sequence, O(L log L)) and the
library's `MultiHeadSelfAttention` (causal, as in BSARec's attention branch,
O(L^2)) get the same input, run under XLA (`tf.function(jit_compile=True)`)
and are timed in the same process. Prints one row per sequence length with
the ratio filter / attention (below 1: the filter is faster).

    python benchmarks/fourier_filter.py [--lengths 50 200 1000 4000] [--out results/benchmarks]

Writes `fourier_filter.json` (a `meta` block and the rows under `results`)
to `--out`.
"""

import argparse
import functools
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf  # noqa: E402

from keras_attn.layers import FourierFilter, MultiHeadSelfAttention  # noqa: E402
from keras_attn.utils import finish_run, median_seconds  # noqa: E402

# The integer options, with their defaults; the results record their values.
SETTINGS = {"batch": 2, "dim": 64, "heads": 2, "cutoff": 3, "repeats": 5}


def forward_backward(layer):
    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            tape.watch(x)
            loss = tf.reduce_sum(tf.square(layer(x)))
        return tape.gradient(loss, [x, *layer.trainable_variables])

    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[50, 200, 1000, 4000])
    for name, default in SETTINGS.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--out", default="results/benchmarks", help="Folder for the JSON.")
    args = parser.parse_args()
    started_at = time.time()
    rows = []
    print(
        f"batch={args.batch} dim={args.dim} heads={args.heads} cutoff={args.cutoff}, "
        f"XLA, forward+backward, median of {args.repeats}"
    )
    print(f"{'L':>6} {'attention (ms)':>15} {'filter (ms)':>12} {'filter/attention':>17}")
    for length in args.lengths:
        x = tf.random.normal((args.batch, length, args.dim))
        attention = MultiHeadSelfAttention(
            args.heads, args.dim // args.heads, attention_pattern="causal"
        )
        fourier = FourierFilter(args.cutoff)
        attention(x)
        fourier(x)
        attention_step, filter_step = forward_backward(attention), forward_backward(fourier)
        attention_time, filter_time = median_seconds(
            [functools.partial(attention_step, x), functools.partial(filter_step, x)], args.repeats
        )
        print(
            f"{length:>6} {attention_time * 1e3:>15.2f} {filter_time * 1e3:>12.2f} "
            f"{filter_time / attention_time:>17.3f}"
        )
        rows.append(
            {
                "length": length,
                "attention_ms": attention_time * 1e3,
                "filter_ms": filter_time * 1e3,
                "ratio": filter_time / attention_time,
            }
        )
    config = {key: getattr(args, key) for key in SETTINGS}
    results = {"config": config, "rows": rows}
    finish_run(
        args.out, "fourier_filter", {"results": results}, started_at=started_at, setting="benchmark"
    )


if __name__ == "__main__":
    main()
