"""Peak memory and time of LogSparse attention against dense Keras attention.

Compares one forward+backward step (gradients of the weights) of
`LogSparseAttention` (pure variant, O(log L) keys per query) with
`keras.layers.MultiHeadAttention(use_causal_mask=True)` (the dense causal
baseline, same heads and sizes) at several sequence lengths. Every
(backend, layer, length) runs in a fresh subprocess, compiled with XLA
(`jax.jit` on JAX, `tf.function(jit_compile=True)` on TensorFlow), and
reports:

- planned peak (JAX only): XLA's own buffer assignment for the compiled step
  (`compiled.memory_analysis()`: temporaries + arguments + outputs). It is
  computed without running, so it is also known where running would not fit.
  TensorFlow exposes no buffer assignment for a `jit_compile` function, so
  under TF+XLA only the measured peak is reported.
- measured peak: the rise of the process's resident-memory high-water mark
  (`VmHWM` in `/proc/self/status`, reset through `/proc/self/clear_refs`
  just before the runs) over the resident memory before them: what the step
  really touched, allocator overhead included, measured over the timed runs
  after a warm-up call (Linux only; glibc's mmap threshold is pinned so that
  freed buffers are returned, not reused). The TensorFlow worker runs with
  `TF_ENABLE_ONEDNN_OPTS=0`: oneDNN's CPU allocator keeps freed buffers
  pooled, so later runs would never raise the mark. TensorFlow's first call
  (XLA compilation + one run) is reported apart as `first_call_rss_bytes`.
- time: median wall time of the compiled step (a single run when one run
  takes over 10 s).

A configuration whose planned peak (JAX's plan, also for TensorFlow) exceeds
`--max-run-gib` is not run; its planned peak is still reported. The growth
exponents are least-squares slopes of log(memory) and log(time) against
log(L). The results go to `--output` as JSON.

    PYTHONPATH=. python benchmarks/logsparse.py [--lengths 512 2048 8192 65536] [--max-run-gib 10]
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
BACKENDS = ("jax", "tensorflow")
SLOW_RUN_S = 10.0


def worker(args):
    """Runs inside the subprocess: one layer at one length, prints JSON lines."""
    import keras

    from keras_attn.layers import LogSparseAttention
    from keras_attn.utils import median_seconds

    key_dim = args.dim // args.heads
    x = np.random.default_rng(0).normal(size=(args.batch, args.length, args.dim)).astype("float32")
    if args.layer == "dense":
        layer = keras.layers.MultiHeadAttention(args.heads, key_dim)
        layer(x[:, :8], x[:, :8])

        def forward(inputs):
            return layer(inputs, inputs, use_causal_mask=True)
    else:
        layer = LogSparseAttention(args.heads, key_dim, variant="pure")
        layer(x[:, :8])
        forward = layer
    report = {"backend": args.backend, "layer": args.layer, "length": args.length, "ran": False}
    if args.backend == "jax":
        step, planned = _jax_step(layer, args.layer == "dense", x)
        report["planned_bytes"] = planned
        print(json.dumps(report), flush=True)  # kept if the run below is killed
        if planned > args.max_run_gib * GIB:
            return
        _reset_peak_rss()
        before = _status_bytes("VmRSS")
        seconds = median_seconds([step], args.repeats, slow_s=SLOW_RUN_S)[0]
    else:
        # The first call compiles; its rise (compile + run) is kept apart. The
        # worker runs without oneDNN's pooling allocator, so the buffers of
        # every later run are mapped afresh and show in the high-water mark.
        step = _tensorflow_step(layer, forward, x)
        _reset_peak_rss()
        before = _status_bytes("VmRSS")
        step()
        report["first_call_rss_bytes"] = _status_bytes("VmHWM") - before
        _reset_peak_rss()
        before = _status_bytes("VmRSS")
        seconds = median_seconds([step], args.repeats, slow_s=SLOW_RUN_S)[0]
    measured = _status_bytes("VmHWM") - before
    print(json.dumps({**report, "ran": True, "rss_bytes": measured, "seconds": seconds}))


def _jax_step(layer, dense, x):
    """The compiled gradient step and XLA's planned peak bytes."""
    import jax
    import jax.numpy as jnp

    from keras_attn.forecasting.memory import planned_peak_bytes

    def loss(weights, inputs):
        if dense:
            outputs = layer.stateless_call(weights, [], inputs, inputs, use_causal_mask=True)[0]
        else:
            outputs = layer.stateless_call(weights, [], inputs)[0]
        return jnp.sum(jnp.square(outputs))

    weights = [v.value for v in layer.trainable_variables]
    inputs = jnp.asarray(x)
    compiled = jax.jit(jax.grad(loss)).lower(weights, inputs).compile()
    planned = planned_peak_bytes(compiled)
    return (lambda: jax.block_until_ready(compiled(weights, inputs))), planned


def _tensorflow_step(layer, forward, x):
    import tensorflow as tf

    inputs = tf.constant(x)

    @tf.function(jit_compile=True)
    def step(inputs):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(forward(inputs)))
        return tape.gradient(loss, layer.trainable_variables)

    return lambda: [g.numpy() for g in step(inputs)]


def _reset_peak_rss():
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")


def _status_bytes(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def measure(backend, layer, length, args):
    """One configuration in a fresh subprocess; a crash (for example out of memory) is reported."""
    command = [sys.executable, __file__, "--worker", layer, "--length", str(length)]
    for name in ("batch", "dim", "heads", "repeats", "max_run_gib"):
        command += [f"--{name.replace('_', '-')}", str(getattr(args, name))]
    # A fixed mmap threshold makes glibc map every large buffer afresh (and
    # unmap it when freed), so each run's buffers show in the high-water mark.
    env = {**os.environ, "KERAS_BACKEND": backend, "MALLOC_MMAP_THRESHOLD_": "131072"}
    env["TF_CPP_MIN_LOG_LEVEL"] = "2"
    env["TF_ENABLE_ONEDNN_OPTS"] = "0"  # oneDNN's CPU allocator pools freed buffers
    command += ["--backend-worker", backend]
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH")]))
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    lines = [line for line in result.stdout.splitlines() if line.startswith("{")]
    report = json.loads(lines[-1]) if lines else {"layer": layer, "length": length, "ran": False}
    report["backend"] = backend
    if result.returncode != 0:
        killed = result.returncode == -9
        reason = result.stderr.strip().splitlines()[-1:] or [f"exit code {result.returncode}"]
        report["error"] = "killed (out of memory)" if killed else reason[0][:120]
    return report


def growth_exponent(lengths, values):
    """Slope of log(value) against log(length), over the available points."""
    points = [(n, v) for n, v in zip(lengths, values, strict=True) if v]
    if len(points) < 2:
        return None
    x, y = np.log([p[0] for p in points]), np.log([p[1] for p in points])
    return float(np.polyfit(x, y, 1)[0])


def _cell(row, key, scale, digits=0):
    value = row.get(key)
    return "-" if value is None else f"{value / scale:.{digits}f}"


def main():
    started_at = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[512, 2048, 8192, 65536])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--max-run-gib", type=float, default=10.0)
    parser.add_argument("--output", default="results/benchmarks/logsparse.json")
    parser.add_argument("--worker", choices=LAYERS, help=argparse.SUPPRESS)
    parser.add_argument("--backend-worker", choices=BACKENDS, help=argparse.SUPPRESS)
    parser.add_argument("--length", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        args.layer, args.backend = args.worker, args.backend_worker
        worker(args)
        return
    results = {"settings": {k: getattr(args, k) for k in ("batch", "dim", "heads", "repeats")}}
    for backend in args.backends:
        results[backend] = run_backend(backend, args, results.get("jax"))
    from keras_attn.utils import write_benchmark

    write_benchmark(args.output, results, started_at=started_at)


def run_backend(backend, args, jax_results):
    """All lengths on one backend: the table, the ratios and the growth exponents."""
    print(
        f"\n{backend} + XLA on CPU: forward+backward, batch={args.batch} dim={args.dim} "
        f"heads={args.heads}; baseline keras.layers.MultiHeadAttention (causal)"
    )
    header = (
        f"{'L':>6} | {'dense plan':>10} {'dense RSS':>9} {'dense s':>8} | {'LS plan':>8} "
        f"{'LS RSS':>7} {'LS s':>7} | {'plan x':>7} {'RSS x':>6} {'time x':>6}"
    )
    print(header + "\n" + "-" * len(header) + "   (memory in MiB; x = dense / LogSparse)")
    rows = {layer: [] for layer in LAYERS}
    for index, length in enumerate(args.lengths):
        for layer in LAYERS:
            planned = (jax_results or {}).get(layer, [{}] * (index + 1))[index].get("planned_bytes")
            if planned is not None and planned > args.max_run_gib * GIB:
                rows[layer].append({"backend": backend, "layer": layer, "length": length})
                rows[layer][-1].update(ran=False, error="JAX plan above --max-run-gib")
            else:
                rows[layer].append(measure(backend, layer, length, args))
        dense, sparse = rows["dense"][-1], rows["logsparse"][-1]
        ratios = {
            key: _ratio(dense, sparse, key) for key in ("planned_bytes", "rss_bytes", "seconds")
        }
        print(
            f"{length:>6} | {_cell(dense, 'planned_bytes', MIB):>10} "
            f"{_cell(dense, 'rss_bytes', MIB):>9} {_cell(dense, 'seconds', 1, 3):>8} | "
            f"{_cell(sparse, 'planned_bytes', MIB):>8} {_cell(sparse, 'rss_bytes', MIB):>7} "
            f"{_cell(sparse, 'seconds', 1, 3):>7} | "
            + " ".join(f"{'-' if r is None else f'{r:.1f}':>6}" for r in ratios.values()),
            flush=True,
        )
        sparse["ratios"] = ratios
        for row in (dense, sparse):
            if not row.get("ran", False):
                why = row.get("error") or f"planned peak above --max-run-gib={args.max_run_gib}"
                print(f"         {row['layer']} at L={length} not run: {why}")
    exponents = {}
    print("growth exponent in L (log-log least squares over the lengths that have a value):")
    for layer in LAYERS:
        exponents[layer] = {
            key: growth_exponent(args.lengths, [row.get(key) for row in rows[layer]])
            for key in ("planned_bytes", "rss_bytes", "seconds")
        }
        print(
            f"  {layer:>9}: "
            + ", ".join(
                f"{name} {'-' if exponents[layer][key] is None else f'{exponents[layer][key]:.2f}'}"
                for name, key in (
                    ("planned memory", "planned_bytes"),
                    ("measured memory", "rss_bytes"),
                    ("time", "seconds"),
                )
            )
        )
    return {**rows, "growth_exponents": exponents}


def _ratio(dense, sparse, key):
    if dense.get(key) is None or not sparse.get(key):
        return None
    return dense[key] / sparse[key]


if __name__ == "__main__":
    main()
