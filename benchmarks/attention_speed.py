"""Forward+backward time of LogSparse and dense causal attention on every backend, per kernel.

For each backend (torch eager, JAX `jit`, TensorFlow with XLA; each in a
fresh process, its load average recorded at the start) and sequence length,
one training step (gradients of the weights and the input) of these
computations, timed in the same process in interleaved rounds (medians):

- `logsparse`: `LogSparseAttention` (pure variant) with
  `implementation="auto"`: the native offset kernel where the backend has
  one (torch, JAX), else the `keras.ops` reference;
- `logsparse_reference`: the same with `implementation="reference"`;
- `causal`: the core with `attention_pattern="causal"` and
  `implementation="auto"`: the backend's fused kernel (torch's
  `scaled_dot_product_attention`, JAX's `jax.nn.dot_product_attention`), or
  the blockwise kernel from `BLOCKWISE_MIN_LENGTH` under XLA on the CPU;
- `causal_reference`: the same with `implementation="reference"`, up to
  `--max-dense-reference` positions (its explicit weights are
  `(length, length)` per head; under XLA on the CPU the blockwise kernel
  runs from 1,024 positions either way);
- `sdpa`: torch's `scaled_dot_product_attention(is_causal=True)` on the
  same-sized heads (attention alone, no projections), the CPU's reference
  for long causal attention, timed in every backend's process.

Ratios are taken within a row: `causal / logsparse` (above 1: LogSparse is
faster), `logsparse_reference / logsparse` (the native offset kernel's
speed-up) and `causal / sdpa` (the core's dense causal step over torch's
fused kernel); `jax_over_tensorflow` is LogSparse's JAX time over its
TF+XLA time at each length (two processes run one after the other, so a
ratio across them, not within one run). Batch 1, 4 heads of 16. `--smoke`
runs tiny sizes in seconds (the tests run it that way). The rows go to
`--output` as JSON; `--plot PNG` draws time against length per backend
from that file, without measuring.

    python benchmarks/attention_speed.py     # about 3 min on 2 cores
    python benchmarks/attention_speed.py --plot docs/img/attention_speed.png
    python benchmarks/attention_speed.py --smoke --backends torch --output /tmp/speed.json
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

BACKENDS = ("torch", "jax", "tensorflow")
STEPS = ("logsparse", "logsparse_reference", "causal", "causal_reference", "sdpa")
# Line style of each step in the plot: native and auto solid, references dashed.
STYLES = {
    "logsparse": ("LogSparse", "C0", "-"),
    "logsparse_reference": ("LogSparse, reference", "C0", "--"),
    "causal": ("dense causal", "C1", "-"),
    "causal_reference": ("dense causal, reference", "C1", "--"),
    "sdpa": ("torch SDPA (attention only)", "C2", ":"),
}


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


def layers_of(length, heads, head_dim, max_dense_reference):
    """`name -> layer` of the timed steps at `length` (`causal_reference` up to its limit)."""
    from keras_attn.layers import LogSparseAttention, MultiHeadSelfAttention

    made = {}
    for implementation, suffix in (("auto", ""), ("reference", "_reference")):
        made[f"logsparse{suffix}"] = LogSparseAttention(
            heads, head_dim, implementation=implementation
        )
        if implementation == "auto" or length <= max_dense_reference:
            made[f"causal{suffix}"] = MultiHeadSelfAttention(
                heads, head_dim, attention_pattern="causal", implementation=implementation
            )
    return made


def measure(lengths, rounds, heads=4, head_dim=16, max_dense_reference=4096):
    """The rows of the current backend, one per length."""
    import keras

    from keras_attn.utils import median_seconds

    rows = []
    for length in lengths:
        x = np.random.default_rng(0).normal(size=(1, length, heads * head_dim)).astype("float32")
        calls = {}
        for name, layer in layers_of(length, heads, head_dim, max_dense_reference).items():
            layer(x[:, :8])
            calls[name] = training_step(layer, x)
        calls["sdpa"] = sdpa_step(length, heads, head_dim)
        seconds = median_seconds(calls, rounds)
        row = {"backend": keras.backend.backend(), "length": length, "seconds": seconds}
        row.update(ratios(seconds))
        rows.append(row)
        cells = "  ".join(f"{name} {s * 1e3:9.2f} ms" for name, s in seconds.items())
        print(f"{row['backend']:>10} L={length:<6} {cells}", flush=True)
    return rows


def ratios(seconds):
    """The ratios of a row's step times (those whose steps ran)."""
    pairs = {
        "causal_over_logsparse": ("causal", "logsparse"),
        "reference_over_native": ("logsparse_reference", "logsparse"),
        "causal_over_sdpa": ("causal", "sdpa"),
    }
    return {
        name: seconds[top] / seconds[bottom]
        for name, (top, bottom) in pairs.items()
        if top in seconds and bottom in seconds
    }


def run_backend(backend, args):
    """`measure` in a fresh process for `backend`; its rows, or an error row."""
    command = [sys.executable, __file__, "--worker", "--lengths", *map(str, args.lengths)]
    command += [
        "--rounds",
        str(args.rounds),
        "--max-dense-reference",
        str(args.max_dense_reference),
    ]
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    load = os.getloadavg()[0]
    result = subprocess.run(command, env=env, capture_output=True, text=True)
    lines = result.stdout.splitlines()
    print("".join(f"{line}\n" for line in lines if not line.startswith("ROWS ")), end="")
    found = [json.loads(line[5:]) for line in lines if line.startswith("ROWS ")]
    if result.returncode or not found:
        error = (result.stderr.strip().splitlines() or [f"exit code {result.returncode}"])[-1]
        return [{"backend": backend, "error": error[:200]}]
    return [{**row, "load_at_start": load} for row in found[0]]


def main():
    started_at = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--lengths", type=int, nargs="+", default=[256, 1024, 4096, 8192, 16384])
    parser.add_argument("--rounds", type=int, default=7, help="interleaved timed rounds")
    parser.add_argument(
        "--max-dense-reference",
        type=int,
        default=4096,
        help="the longest length at which the dense causal reference is timed",
    )
    parser.add_argument("--smoke", action="store_true", help="tiny sizes, seconds")
    parser.add_argument("--output", default="results/benchmarks/attention_speed.json")
    parser.add_argument("--plot", metavar="PNG", help="draw --output's times to PNG and stop")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.plot:
        with open(args.output) as file:
            save_figure(figure(json.load(file)["results"]), args.plot)
        return
    if args.smoke:
        args.lengths, args.rounds = [32, 64], 1
    if args.worker:
        rows = measure(args.lengths, args.rounds, max_dense_reference=args.max_dense_reference)
        print("ROWS " + json.dumps(rows), flush=True)
        return
    os.environ.setdefault("KERAS_BACKEND", args.backends[0])
    from keras_attn.utils import write_benchmark

    rows = [row for backend in args.backends for row in run_backend(backend, args)]
    settings = {"lengths": args.lengths, "rounds": args.rounds, "heads": 4, "head_dim": 16}
    settings["max_dense_reference"] = args.max_dense_reference
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


def figure(results):
    """Time of each step against the length, one panel per backend, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [row for row in results["rows"] if "seconds" in row]
    backends = [b for b in BACKENDS if any(row["backend"] == b for row in rows)]
    shown, axes = plt.subplots(1, len(backends), figsize=(4.2 * len(backends), 3.6), squeeze=False)
    for axis, backend in zip(axes[0], backends, strict=True):
        mine = [row for row in rows if row["backend"] == backend]
        mine.sort(key=lambda row: row["length"])
        for step in STEPS:
            timed = [row for row in mine if step in row["seconds"]]
            if timed:
                label, color, style = STYLES[step]
                times = [row["seconds"][step] * 1e3 for row in timed]
                lengths = [row["length"] for row in timed]
                axis.plot(lengths, times, style, color=color, marker="o", markersize=3, label=label)
        axis.set(xscale="log", yscale="log", title=backend, xlabel="sequence length")
        axis.set_xticks([row["length"] for row in mine], [f"{row['length']:,}" for row in mine])
        axis.xaxis.set_minor_formatter(matplotlib.ticker.NullFormatter())
        axis.grid(True, which="major", alpha=0.3)
    axes[0][0].set_ylabel("forward + backward step (ms)")
    axes[0][-1].legend(fontsize=7)
    settings = results["settings"]
    shown.suptitle(
        f"Attention training step, batch 1, {settings['heads']} heads of {settings['head_dim']}, "
        f"median of {settings['rounds']} rounds"
    )
    shown.tight_layout()
    return shown


def save_figure(shown, path):
    """Writes the figure to `path` (PNG) and closes it."""
    import matplotlib.pyplot as plt

    shown.savefig(path, format="png", dpi=120, bbox_inches="tight")
    plt.close(shown)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
