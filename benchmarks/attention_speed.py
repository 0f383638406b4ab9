"""Forward+backward time of LogSparse and dense causal attention on every backend.

For each backend (torch eager, JAX `jit`, TensorFlow with XLA; each in a
fresh process) and sequence length, one training step (gradients of the
weights and the input) of three computations, timed in the same process in
interleaved rounds (medians):

- `logsparse`: `LogSparseAttention` (pure variant);
- `causal`: the core with `attention_pattern="causal"`: torch's
  `scaled_dot_product_attention`, or the blockwise path from
  `BLOCKWISE_MIN_LENGTH` under XLA on the CPU;
- `sdpa`: torch's `scaled_dot_product_attention(is_causal=True)` on the
  same-sized heads (attention alone, no projections), the CPU's reference
  for long causal attention, timed in every backend's process.

Ratios are taken against the named baseline of the same row: `causal /
logsparse` (above 1: LogSparse is faster) and `causal / sdpa` (the core's
dense causal step over torch's fused kernel); `jax_over_tensorflow` is
LogSparse's JAX time over its TF+XLA time at each length (two processes
run one after the other, so a ratio across them, not within one run). Batch 1, 4 heads of 16.
`--smoke` runs tiny sizes in seconds (the tests run it that way). The rows
go to `--output` as JSON.

    python benchmarks/attention_speed.py             # ~7 min on 2 cores
    python benchmarks/attention_speed.py --smoke --backends torch
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

BACKENDS = ("torch", "jax", "tensorflow")


def training_step(layer, x):
    """A callable running one forward+backward step of `layer` on `x`."""
    import keras

    backend = keras.backend.backend()
    if backend == "torch":
        import torch

        weights = [v.value for v in layer.trainable_variables]
        inputs = torch.tensor(x, requires_grad=True)
        return lambda: torch.autograd.grad(torch.sum(torch.square(layer(inputs))), weights)
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        weights = [v.value for v in layer.trainable_variables]

        def loss(weights, inputs):
            return jnp.sum(jnp.square(layer.stateless_call(weights, [], inputs)[0]))

        step = jax.jit(jax.grad(loss, argnums=(0, 1)))
        inputs = jnp.asarray(x)
        return lambda: jax.block_until_ready(step(weights, inputs))
    import tensorflow as tf

    inputs = tf.constant(x)

    @tf.function(jit_compile=True)
    def step(inputs):
        with tf.GradientTape() as tape:
            tape.watch(inputs)
            loss = tf.reduce_sum(tf.square(layer(inputs)))
        return tape.gradient(loss, [*layer.trainable_variables, inputs])

    return lambda: step(inputs)


def sdpa_step(length, heads, head_dim):
    """torch's fused causal attention, forward+backward, on `(1, heads, length, head_dim)`."""
    import torch

    q, k, v = (torch.randn(1, heads, length, head_dim, requires_grad=True) for _ in range(3))

    def step():
        out = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        return torch.autograd.grad(torch.sum(torch.square(out)), (q, k, v))

    return step


def measure(lengths, rounds, heads=4, head_dim=16):
    """The rows of the current backend, one per length."""
    import keras

    from keras_attn.layers import LogSparseAttention, MultiHeadSelfAttention
    from keras_attn.utils import median_seconds

    rows = []
    for length in lengths:
        x = np.random.default_rng(0).normal(size=(1, length, heads * head_dim)).astype("float32")
        logsparse = LogSparseAttention(heads, head_dim)
        causal = MultiHeadSelfAttention(heads, head_dim, attention_pattern="causal")
        logsparse(x[:, :8])
        causal(x[:, :8])
        calls = {
            "logsparse": training_step(logsparse, x),
            "causal": training_step(causal, x),
            "sdpa": sdpa_step(length, heads, head_dim),
        }
        seconds = median_seconds(calls, rounds)
        row = {"backend": keras.backend.backend(), "length": length, "seconds": seconds}
        row["causal_over_logsparse"] = seconds["causal"] / seconds["logsparse"]
        row["causal_over_sdpa"] = seconds["causal"] / seconds["sdpa"]
        rows.append(row)
        cells = "  ".join(f"{name} {s * 1e3:9.2f} ms" for name, s in seconds.items())
        print(
            f"{row['backend']:>10} L={length:<6} {cells}  causal/logsparse "
            f"{row['causal_over_logsparse']:6.2f}  causal/sdpa {row['causal_over_sdpa']:6.2f}",
            flush=True,
        )
    return rows


def run_backend(backend, args):
    """`measure` in a fresh process for `backend`; its rows, or an error row."""
    command = [sys.executable, __file__, "--worker", "--lengths", *map(str, args.lengths)]
    command += ["--rounds", str(args.rounds)]
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = result.stdout.splitlines()
    print("".join(f"{line}\n" for line in lines if not line.startswith("ROWS ")), end="")
    found = [json.loads(line[5:]) for line in lines if line.startswith("ROWS ")]
    if result.returncode or not found:
        error = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        return [{"backend": backend, "error": error[:200]}]
    return found[0]


def main():
    started_at = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 8192, 16384])
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timed rounds")
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds")
    parser.add_argument("--output", default="results/benchmarks/attention_speed.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.smoke:
        args.lengths, args.rounds = [32, 64], 1
    if args.worker:
        print("ROWS " + json.dumps(measure(args.lengths, args.rounds)), flush=True)
        return
    os.environ.setdefault("KERAS_BACKEND", args.backends[0])
    from keras_attn.utils import write_benchmark

    rows = [row for backend in args.backends for row in run_backend(backend, args)]
    settings = {"lengths": args.lengths, "rounds": args.rounds, "heads": 4, "head_dim": 16}
    results = {"settings": settings, "rows": rows, "jax_over_tensorflow": jax_over_tensorflow(rows)}
    write_benchmark(args.output, results, started_at=started_at)


def jax_over_tensorflow(rows):
    """Per length, JAX's LogSparse time over TF+XLA's (each in its own process)."""
    seconds = {
        (row["backend"], row["length"]): row["seconds"]["logsparse"]
        for row in rows
        if "seconds" in row
    }
    return [
        {"length": length, "ratio": seconds[("jax", length)] / seconds[("tensorflow", length)]}
        for backend, length in seconds
        if backend == "jax" and ("tensorflow", length) in seconds
    ]


if __name__ == "__main__":
    main()
