"""GPU check of the attention layers: XLA outputs against the CPU, and throughput.

For TensorFlow, JAX and torch (each in a fresh process), in float32 and
`mixed_bfloat16`:

1. every attention layer of the library (the core with each pattern and
   logit scale, convolutional and LogSparse attention, the transformer
   block) is compiled with XLA (`jax.jit`, `tf.function(jit_compile=True)`;
   torch runs eagerly, as Keras does without `jit_compile`) on the default
   device, and its output is compared with the same layer, same weights,
   run in float32 on the CPU (float32 matmuls at full precision, TF32
   off; bfloat16 with a bfloat16-sized tolerance);
2. forward+backward steps per second of the core against
   `keras.layers.MultiHeadAttention`, and of `LogSparseAttention` against
   dense causal `MultiHeadAttention` and the core's causal pattern (fused,
   flash attention where the backend has it), at L = 8192 to 65,536 (a
   step that runs out of memory is reported as such).

It is not part of the test suite. On a machine without a GPU it runs on the
CPU; `--cpu-smoke` shrinks every size so that the whole check takes seconds
(the tests run it that way).

    python benchmarks/gpu_check.py               # on a GPU: JAX ~4 min, torch ~1 min on an H200
    python benchmarks/gpu_check.py --cpu-smoke   # tiny sizes, any machine
"""

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

BACKENDS = ("tensorflow", "jax", "torch")
DTYPES = ("float32", "mixed_bfloat16")
TOLERANCE = {"float32": 1e-4, "mixed_bfloat16": 5e-2}  # relative to the output's scale


def layer_configs(smoke):
    """(name, class name, kwargs) of every layer checked."""
    from keras_attn.layers import CausalWindowPattern, LogSparsePattern

    window = 3 if smoke else 64
    return [
        ("core dense", "MultiHeadSelfAttention", {}),
        ("core causal", "MultiHeadSelfAttention", {"attention_pattern": "causal"}),
        (
            "core causal log-length",
            "MultiHeadSelfAttention",
            {"attention_pattern": "causal", "logit_scale": "log_length"},
        ),
        (
            "core causal window",
            "MultiHeadSelfAttention",
            {"attention_pattern": CausalWindowPattern(window)},
        ),
        (
            "core LogSparse restart",
            "MultiHeadSelfAttention",
            {"attention_pattern": LogSparsePattern("restart", subsequence_length=window)},
        ),
        ("convolutional k=3", "ConvolutionalSelfAttention", {"kernel_size": 3}),
        ("LogSparse pure", "LogSparseAttention", {"variant": "pure"}),
        ("LogSparse local w=4", "LogSparseAttention", {"variant": "local", "local_window": 4}),
        (
            "LogSparse restart",
            "LogSparseAttention",
            {"variant": "restart", "subsequence_length": 16},
        ),
        ("transformer block", "TransformerBlock", {"intermediate_dim": 64}),
    ]


def _make(class_name, kwargs, heads, key_dim, dtype):
    import keras_attn.layers as layers

    cls = getattr(layers, class_name)
    if class_name == "TransformerBlock":
        return cls(heads, key_dim=key_dim, dtype=dtype, **kwargs)
    return cls(heads, key_dim, dtype=dtype, **kwargs)


def check_outputs(backend, dtype, args):
    """Compiled outputs on the default device against float32 on the CPU."""
    import keras

    rows = []
    rng = np.random.default_rng(0)
    x = rng.normal(size=(2, args.check_length, args.dim)).astype("float32")
    for name, class_name, kwargs in layer_configs(args.cpu_smoke):
        reference_layer = _make(class_name, kwargs, args.heads, args.dim // args.heads, "float32")
        reference = _on_cpu(backend, lambda layer=reference_layer: layer(x))
        layer = _make(class_name, kwargs, args.heads, args.dim // args.heads, dtype)
        layer(x[:, :8])
        layer.set_weights(reference_layer.get_weights())
        output = keras.ops.convert_to_numpy(keras.ops.cast(_compiled(backend, layer)(x), "float32"))
        error = float(np.max(np.abs(output - reference)) / (np.max(np.abs(reference)) + 1e-12))
        ok = bool(error <= TOLERANCE[dtype])
        rows.append({"layer": name, "relative_error": error, "ok": ok})
        print(f"  {name:<24} max error / max |output| = {error:.2e}  {'ok' if ok else 'FAIL'}")
    return rows


def _on_cpu(backend, call):
    import keras

    with keras.device("cpu:0"):
        return keras.ops.convert_to_numpy(call())


def _compiled(backend, layer, training_step=False):
    """`layer(x)` (or its weight gradients) compiled with XLA (eager on torch)."""
    if backend == "torch":
        return _torch_eager(layer, training_step)
    if backend == "jax":
        import jax
        import jax.numpy as jnp

        weights = [v.value for v in layer.trainable_variables]
        extra = [v.value for v in layer.non_trainable_variables]

        def forward(weights, x):
            return layer.stateless_call(weights, extra, x)[0]

        if not training_step:
            return lambda x: jax.jit(forward)(weights, x)

        def loss(weights, x):
            return jnp.sum(jnp.square(forward(weights, x).astype("float32")))

        step = jax.jit(jax.grad(loss))
        return lambda x: jax.block_until_ready(step(weights, x))
    import tensorflow as tf

    if not training_step:
        return tf.function(layer, jit_compile=True)

    @tf.function(jit_compile=True)
    def step(x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(tf.square(tf.cast(layer(x), "float32")))
        return tape.gradient(loss, layer.trainable_variables)

    return lambda x: [g.numpy() for g in step(x)]


def _torch_eager(layer, training_step):
    import torch

    if not training_step:
        return layer
    weights = [v.value for v in layer.trainable_variables]

    def step(x):
        loss = torch.sum(torch.square(layer(x).float()))
        gradients = torch.autograd.grad(loss, weights)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        return gradients

    return step


class _Causal:
    """`keras.layers.MultiHeadAttention` as a self-attention callable (causal or not)."""

    def __init__(self, layer, causal):
        self.layer, self.causal = layer, causal
        self.trainable_variables = layer.trainable_variables
        self.non_trainable_variables = layer.non_trainable_variables

    def __call__(self, x):
        return self.layer(x, x, use_causal_mask=self.causal)

    def stateless_call(self, weights, extra, x):
        return self.layer.stateless_call(weights, extra, x, x, use_causal_mask=self.causal)


def steps_per_second(backend, layer, x, repeats):
    """Forward+backward steps per second, or the error that stopped it."""
    try:
        step = _compiled(backend, layer, training_step=True)
        step(x)  # compile
        start = time.perf_counter()
        for _ in range(repeats):
            step(x)
        return repeats / (time.perf_counter() - start)
    except Exception as error:  # out of memory on the device, typically
        return f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"


def throughput(backend, dtype, args):
    import keras

    from keras_attn.layers import LogSparseAttention, MultiHeadSelfAttention

    key_dim = args.dim // args.heads
    rows = []
    pairs = [("core", "keras MHA", False, args.core_length)]
    pairs += [("LogSparse", "dense causal MHA", True, length) for length in args.lengths]
    for name, baseline_name, causal, length in pairs:
        x = np.random.default_rng(0).normal(size=(1, length, args.dim)).astype("float32")
        x = keras.ops.convert_to_tensor(x)  # on the device once, not at every step
        if causal:
            layer = LogSparseAttention(args.heads, key_dim, dtype=dtype)
        else:
            layer = MultiHeadSelfAttention(args.heads, key_dim, dtype=dtype)
        baseline = keras.layers.MultiHeadAttention(args.heads, key_dim, dtype=dtype)
        layer(x[:, :8])
        baseline(x[:, :8], x[:, :8])
        rates = {
            name: steps_per_second(backend, layer, x, args.repeats),
            baseline_name: steps_per_second(backend, _Causal(baseline, causal), x, args.repeats),
        }
        if causal:  # the core's causal pattern: flash attention (fused kernels) on a GPU
            core = MultiHeadSelfAttention(
                args.heads, key_dim, attention_pattern="causal", dtype=dtype
            )
            core(x[:, :8])
            rates["dense causal core"] = steps_per_second(backend, core, x, args.repeats)
        rows.append({"length": length, "steps_per_second": rates})
        cells = [f"{k} {v:.2f}/s" if isinstance(v, float) else f"{k} {v}" for k, v in rates.items()]
        print(f"  L={length:<6} " + ", ".join(cells), flush=True)
    return rows


def worker(args):
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
        device = jax.devices()[0].device_kind
    elif backend == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    else:
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)
        gpus = tf.config.list_physical_devices("GPU")
        device = gpus[0].name if gpus else "CPU"
    report = {"backend": backend, "device": device, "dtypes": {}}
    for dtype in args.dtypes:
        print(f"{backend} on {device}, {dtype}:", flush=True)
        keras.config.set_dtype_policy(dtype)
        outputs = check_outputs(backend, dtype, args)
        report["dtypes"][dtype] = {
            "outputs": outputs,
            "throughput": throughput(backend, dtype, args),
        }
        keras.config.set_dtype_policy("float32")
    return report


def main():
    started_at = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=list(BACKENDS))
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--lengths", type=int, nargs="+", default=[8192, 16384, 32768, 65536])
    parser.add_argument("--core-length", type=int, default=8192)
    parser.add_argument("--check-length", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes, seconds on a CPU")
    parser.add_argument("--output", default=None, help="JSON file for the results")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu_smoke:
        args.lengths, args.core_length, args.check_length = [64, 128], 64, 24
        args.dim, args.heads, args.repeats = 16, 2, 1
    if args.worker:
        print("REPORT " + json.dumps(worker(args)), flush=True)
        return
    # This process imports Keras only to write the JSON: on a machine without
    # TensorFlow, Keras' default backend would fail to import.
    os.environ.setdefault("KERAS_BACKEND", args.backends[0])
    reports = []
    for backend in args.backends:
        reports.append(run_backend(backend))
        ok = _all_match(reports)
        if args.output:  # after each backend, so that a run stopped early keeps what ran
            from keras_attn.utils import write_benchmark

            write_benchmark(args.output, {"ok": ok, "reports": reports}, started_at=started_at)
    print(f"\nall outputs match the CPU: {ok}; wall time {time.time() - started_at:.0f} s")
    sys.exit(0 if ok else 1)


def run_backend(backend):
    """Runs the worker for `backend` in a fresh process, printing its lines as they come."""
    command = [sys.executable, __file__, "--worker", *sys.argv[1:]]
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    found = []
    with subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as worker:
        for line in worker.stdout:
            if line.startswith("REPORT "):
                found.append(json.loads(line[7:]))
            else:
                print(line, end="", flush=True)
    if worker.returncode or not found:
        return {"backend": backend, "error": f"exit code {worker.returncode}"}
    return found[0]


def _all_match(reports):
    return all(
        row["ok"]
        for report in reports
        for dtype in report.get("dtypes", {}).values()
        for row in dtype["outputs"]
    ) and not any("error" in report for report in reports)


if __name__ == "__main__":
    main()
