"""Peak memory and time of LogSparse attention against dense Keras attention.

Compares one forward+backward step (gradients of the weights) of
`LogSparseAttention` (pure variant, O(log L) keys per query) with
`keras.layers.MultiHeadAttention(use_causal_mask=True)` (the dense causal
baseline, same heads and sizes) at several sequence lengths. Every
(layer, length) runs in a fresh subprocess on the JAX backend, compiled with
XLA (`jax.jit`), and reports:

- planned peak: XLA's own buffer assignment for the compiled step
  (`compiled.memory_analysis()`: temporaries + arguments + outputs). It is
  computed without running, so it is also known where running would not fit.
- measured peak: the rise of the process's resident-memory high-water mark
  (`VmHWM` in `/proc/self/status`, reset through `/proc/self/clear_refs`
  just before the runs) over the resident memory before them: what the step
  really touched, allocator overhead included (Linux only; glibc's mmap
  threshold is pinned so that freed buffers are returned, not reused).
- time: median wall time of the compiled step.

A configuration whose planned peak exceeds `--max-run-gib` is not run; its
planned peak is still reported. The growth exponents are least-squares
slopes of log(memory) and log(time) against log(L).

    python benchmarks/logsparse.py [--lengths 512 2048 8192 16384] [--max-run-gib 6]
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

GIB = 2**30
MIB = 2**20
LAYERS = ("dense", "logsparse")


def worker(args):
    """Runs inside the subprocess: one layer at one length, prints a JSON line."""
    import jax
    import jax.numpy as jnp
    import keras

    from keras_attn.layers import LogSparseAttention

    key_dim = args.dim // args.heads
    x = jnp.asarray(
        np.random.default_rng(0).normal(size=(args.batch, args.length, args.dim)), "float32"
    )
    if args.layer == "dense":
        layer = keras.layers.MultiHeadAttention(args.heads, key_dim)
        layer(x[:, :8], x[:, :8])

        def forward(weights, inputs):
            return layer.stateless_call(weights, [], inputs, inputs, use_causal_mask=True)[0]
    else:
        layer = LogSparseAttention(args.heads, key_dim, variant="pure")
        layer(x[:, :8])

        def forward(weights, inputs):
            return layer.stateless_call(weights, [], inputs)[0]

    def loss(weights, inputs):
        return jnp.sum(jnp.square(forward(weights, inputs)))

    weights = [v.value for v in layer.trainable_variables]
    compiled = jax.jit(jax.grad(loss)).lower(weights, x).compile()
    analysis = compiled.memory_analysis()
    planned = (
        analysis.temp_size_in_bytes
        + analysis.argument_size_in_bytes
        + analysis.output_size_in_bytes
        - analysis.alias_size_in_bytes
    )
    report = {"layer": args.layer, "length": args.length, "planned_bytes": planned, "ran": False}
    print(json.dumps(report), flush=True)  # kept if the run below is killed
    if planned > args.max_run_gib * GIB:
        return
    _reset_peak_rss()
    before = _status_bytes("VmRSS")
    times = []
    for _ in range(args.repeats + 1):  # the first run warms up
        start = time.perf_counter()
        jax.block_until_ready(compiled(weights, x))
        times.append(time.perf_counter() - start)
    measured = _status_bytes("VmHWM") - before
    seconds = float(np.median(times[1:]))
    print(json.dumps({**report, "ran": True, "rss_bytes": measured, "seconds": seconds}))


def _reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(layer, length, args):
    """One configuration in a fresh subprocess; a crash (for example out of memory) is reported."""
    command = [sys.executable, __file__, "--worker", layer, "--length", str(length)]
    for name in ("batch", "dim", "heads", "repeats", "max_run_gib"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    # A fixed mmap threshold makes glibc map every large buffer afresh (and
    # unmap it when freed), so each run's buffers show in the high-water mark.
    env = {**os.environ, "KERAS_BACKEND": "jax", "MALLOC_MMAP_THRESHOLD_": "131072"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {"layer": layer, "length": length, "ran": False}
    if result.returncode != 0:
        killed = result.returncode == -9
        reason = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        report["error"] = "killed (out of memory)" if killed else reason[0][:120]
    return report


def growth_exponent(lengths, values):
    """Slope of log(value) against log(length), over the available points."""
    points = [(n, v) for n, v in zip(lengths, values, strict=True) if v]
    if len(points) < 2:
        return float("nan")
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def _cell(row, key, scale, digits=0):
    value = row.get(key)
    return "-" if value is None else f"{value / scale:.{digits}f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192, 16384])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-run-gib", type=float, default=6.0)
    parser.add_argument("--worker", choices=LAYERS, help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.layer = args.worker
        worker(args)
        return
    print(
        f"forward+backward, batch={args.batch} dim={args.dim} heads={args.heads}, JAX + XLA on "
        f"CPU, median of {args.repeats}; baseline: keras.layers.MultiHeadAttention (causal)"
    )
    header = (
        f"{'L':>6} | {'dense plan':>10} {'dense RSS':>9} {'dense s':>8} | {'LS plan':>8} "
        f"{'LS RSS':>7} {'LS s':>7} | {'plan x':>7} {'RSS x':>6} {'time x':>6}"
    )
    print(header + "\n" + "-" * len(header) + "   (memory in MiB; x = dense / LogSparse)")
    rows = {layer: [] for layer in LAYERS}
    for length in args.lengths:
        dense, sparse = (measure(layer, length, args) for layer in LAYERS)
        rows["dense"].append(dense)
        rows["logsparse"].append(sparse)
        ratios = [_ratio(dense, sparse, key) for key in ("planned_bytes", "rss_bytes", "seconds")]
        print(
            f"{length:>6} | {_cell(dense, 'planned_bytes', MIB):>10} "
            f"{_cell(dense, 'rss_bytes', MIB):>9} {_cell(dense, 'seconds', 1, 3):>8} | "
            f"{_cell(sparse, 'planned_bytes', MIB):>8} {_cell(sparse, 'rss_bytes', MIB):>7} "
            f"{_cell(sparse, 'seconds', 1, 3):>7} | " + " ".join(f"{r:>6}" for r in ratios),
            flush=True,
        )
        for row in (dense, sparse):
            if not row.get("ran", False):
                why = row.get("error") or f"planned peak above --max-run-gib={args.max_run_gib}"
                print(f"         {row['layer']} at L={length} not run: {why}")
    print("\ngrowth exponent in L (log-log least squares over the lengths that have a value):")
    for layer in LAYERS:
        exponents = {
            key: growth_exponent(args.lengths, [row.get(key) for row in rows[layer]])
            for key in ("planned_bytes", "rss_bytes", "seconds")
        }
        print(
            f"  {layer:>9}: planned memory {exponents['planned_bytes']:.2f}, "
            f"measured memory {exponents['rss_bytes']:.2f}, time {exponents['seconds']:.2f}"
        )


def _ratio(dense, sparse, key):
    if dense.get(key) is None or not sparse.get(key):
        return "-"
    return f"{dense[key] / sparse[key]:.1f}"


if __name__ == "__main__":
    main()
