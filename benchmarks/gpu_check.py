"""GPU check of the attention layers and kernels: outputs against the CPU, and speed.

For JAX and torch (TensorFlow on request; each in a fresh process):

1. every attention layer of the library (the core with each pattern and
   logit scale, convolutional and LogSparse attention, the transformer
   block), in float32 and `mixed_bfloat16`, compiled with XLA (`jax.jit`,
   `tf.function(jit_compile=True)`; torch runs eagerly, as Keras does
   without `jit_compile`) on the default device, against the same layer,
   same weights, in float32 on the CPU (float32 matmuls at full
   precision, TF32 off; bfloat16 with a bfloat16-sized tolerance);
2. each native attention kernel against its `keras.ops` reference on the
   device (`keras_attn.kernels`: outputs and gradients, with a padding
   mask that leaves queries without a key, in float32 and bfloat16);
3. in bfloat16, forward+backward steps per second of `LogSparseAttention`
   (native kernels and references) against the backend's fastest dense
   causal attention (the core's causal pattern: torch's
   `scaled_dot_product_attention`, JAX's cuDNN flash attention) and
   Keras' causal `MultiHeadAttention`, at L = 4,096 to 65,536 (a step that
   runs out of memory is reported as such); and of the core against
   `keras.layers.MultiHeadAttention` (dense) at L = 8,192 and 32,768;
4. latencies at batch 1 and 64: the AdaViT fast path of an untrained
   DeiT-S against the full model (`benchmarks/adavit.py --paper-scale`,
   DeiT-S only, 2 token buckets), and an untrained MiniLM-sized BERT
   encoder with half its heads pruned against the unpruned one (as
   `benchmarks/head_pruning.py` does).

The targets: LogSparse at least as fast as the fastest dense causal
attention at 8,192 and 3 times as fast at 32,768; the core within 1.1x of
Keras' `MultiHeadAttention`. Sections 3 and 4 need an accelerator (on a
CPU they are skipped, except with `--cpu-smoke`), and each backend gets an
even share of `--budget-s` seconds (480: the whole check within 8
minutes), a measurement past it being skipped and said so. Each backend's
report goes to `OUTPUT_DIR/gpu_check_<backend>.json` as soon as it is
done. It is not part of the test suite; `--cpu-smoke` shrinks every size
so that the whole check takes seconds on any machine (the tests run its
functions that way).

    python benchmarks/gpu_check.py --output-dir results/benchmarks   # on a GPU, <= 8 min
    python benchmarks/gpu_check.py --cpu-smoke                       # tiny sizes, any machine
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
SPEED_DTYPE = "mixed_bfloat16"


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

    @property
    def trainable_variables(self):
        return self.layer.trainable_variables

    @property
    def non_trainable_variables(self):
        return self.layer.non_trainable_variables

    def __call__(self, x):
        return self.layer(x, x, use_causal_mask=self.causal)

    def stateless_call(self, weights, extra, x):
        return self.layer.stateless_call(weights, extra, x, x, use_causal_mask=self.causal)


def steps_per_second(backend, layer, x, repeats, deadline=float("inf")):
    """Forward+backward steps per second, or why there is none (an error, the time budget)."""
    if time.time() > deadline:
        return "skipped: time budget"
    try:
        step = _compiled(backend, layer, training_step=True)
        step(x)  # compile
        start = time.perf_counter()
        for _ in range(repeats):
            step(x)
        return repeats / (time.perf_counter() - start)
    except Exception as error:  # out of memory on the device, typically
        return f"{type(error).__name__}: {str(error).splitlines()[0][:80]}"


def throughput(backend, args, deadline):
    """Steps per second in bfloat16: LogSparse against dense causal attention, the core against
    Keras' `MultiHeadAttention`; a measurement past `deadline` is skipped."""
    import keras

    from keras_attn.layers import LogSparseAttention, MultiHeadSelfAttention

    key_dim, dtype = args.dim // args.heads, SPEED_DTYPE
    rows = []
    cases = [(length, False) for length in args.core_lengths]
    cases += [(length, True) for length in args.lengths]
    for length, causal in cases:
        x = np.random.default_rng(0).normal(size=(1, length, args.dim)).astype("float32")
        x = keras.ops.convert_to_tensor(x)  # on the device once, not at every step
        keras_mha = keras.layers.MultiHeadAttention(args.heads, key_dim, dtype=dtype)
        if causal:  # LogSparse first, the backend's fastest dense causal attention next
            layers = {
                "LogSparse": LogSparseAttention(args.heads, key_dim, dtype=dtype),
                "dense causal core": MultiHeadSelfAttention(
                    args.heads, key_dim, attention_pattern="causal", dtype=dtype
                ),
                "dense causal keras MHA": _Causal(keras_mha, causal=True),
                "LogSparse reference": LogSparseAttention(
                    args.heads, key_dim, dtype=dtype, implementation="reference"
                ),
            }
        else:
            layers = {
                "core": MultiHeadSelfAttention(args.heads, key_dim, dtype=dtype),
                "keras MHA": _Causal(keras_mha, causal=False),
            }
        rates = {}
        for name, layer in layers.items():
            layer(x[:, :8])
            rates[name] = steps_per_second(backend, layer, x, args.repeats, deadline)
        rows.append({"length": length, "steps_per_second": rates})
        cells = [f"{k} {v:.2f}/s" if isinstance(v, float) else f"{k} {v}" for k, v in rates.items()]
        print(f"  L={length:<6} " + ", ".join(cells), flush=True)
    return rows


def check_kernels(backend, args):
    """Each native kernel against its reference on the device: outputs and gradients."""
    from keras_attn import kernels
    from keras_attn.layers import LogSparsePattern
    from keras_attn.testing.gradients import function_output_and_gradients

    length = args.check_length
    arrays = [np.random.default_rng(n).normal(size=(2, length, 2, 8)) for n in range(3)]
    arrays = [array.astype("float32") for array in arrays]
    mask = np.ones((2, 1, 1, length), bool)
    mask[0, ..., :3] = False  # the first queries of example 0 see no key (causal)
    offsets = LogSparsePattern("pure").static_offsets(length)
    slots = np.random.default_rng(3).random((2, 1, length, len(offsets))) < 0.7
    slots[0, 0, :3] = False  # queries that use no slot
    cases = {
        "dense_attention": lambda implementation: (
            lambda q, k, v: kernels.dense_attention(
                q, k, v, mask, scale=0.35, causal=True, implementation=implementation
            )[0]
        ),
        "offset_attention": lambda implementation: (
            lambda q, k, v: kernels.offset_attention(
                q, k, v, offsets, slots, scale=0.35, implementation=implementation
            )[0]
        ),
    }
    rows = []
    for kernel, make in cases.items():
        if not kernels.has_native(kernel):
            continue
        for dtype in ("float32", "bfloat16"):
            native, reference = (
                function_output_and_gradients(make(implementation), arrays, dtype=dtype)
                for implementation in ("native", "reference")
            )
            error = max(
                _relative_error(ours, theirs)
                for ours, theirs in zip(
                    [native[0], *native[1]], [reference[0], *reference[1]], strict=True
                )
            )
            ok = bool(error <= TOLERANCE["float32" if dtype == "float32" else SPEED_DTYPE])
            rows.append({"kernel": kernel, "dtype": dtype, "relative_error": error, "ok": ok})
            verdict = "ok" if ok else "FAIL"
            print(f"  {kernel:<18} {dtype:<9} native / reference: {error:.2e}  {verdict}")
    return rows


def _relative_error(ours, theirs):
    finite = np.isfinite(ours).all()
    return (
        float(np.max(np.abs(ours - theirs)) / (np.max(np.abs(theirs)) + 1e-12))
        if finite
        else np.inf
    )


def latencies(args, deadline):
    """Milliseconds per batch at batch 1 and 64: the AdaViT fast path and a pruned encoder."""
    import keras

    if time.time() > deadline:
        return {"skipped": "time budget"}
    result = {"head_pruning": pruned_encoder_throughput(args)}
    if keras.backend.backend() == "torch":
        result["adavit"] = "skipped: the fast path compiles with XLA (TensorFlow and JAX)"
        return result
    adavit = _sibling("adavit")
    size = "small" if args.cpu_smoke else "default"
    options = argparse.Namespace(seed=0, mac_ratio=2.0, token_buckets=2, head_buckets=1)
    batches = adavit.measure_paper_scale("deit_s", size, options, set())
    result["adavit"] = [case for cases in batches for case in cases]
    return result


def pruned_encoder_throughput(args):
    """Sentences per second of an untrained MiniLM-sized encoder, unpruned and half pruned."""
    from keras_attn.models import build_bert_encoder
    from keras_attn.pruning import measure_throughput, prune_heads, select_heads

    layers, heads = (2, 4) if args.cpu_smoke else (6, 12)
    hidden = 32 if args.cpu_smoke else 384
    encoder = build_bert_encoder(
        30522, num_layers=layers, num_heads=heads, hidden_dim=hidden, intermediate_dim=4 * hidden
    )
    scores = {
        f"layer_{index}/attention": np.random.default_rng(index).random(heads)
        for index in range(layers)
    }
    pruned = prune_heads(encoder, select_heads(scores, layers * heads // 2))
    result = {}
    for batch in (1, 64):
        rng = np.random.default_rng(0)
        inputs = {
            "token_ids": rng.integers(1000, 30000, (batch, 64)).astype("int32"),
            "padding_mask": np.ones((batch, 64), "int32"),
            "segment_ids": np.zeros((batch, 64), "int32"),
        }
        unpruned, half = measure_throughput(
            [encoder, pruned], inputs, args.repeats * (8 if batch == 1 else 1)
        )
        result[str(batch)] = {"unpruned": unpruned, "half pruned": half, "ratio": half / unpruned}
        print(
            f"  encoder, batch {batch}: half pruned {half / unpruned:.2f}x the unpruned", flush=True
        )
    return result


def _sibling(name):
    """The benchmark script `NAME.py` beside this one, as a module."""
    import importlib.util

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"{name}_benchmark", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(args):
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        jax.config.update("jax_default_matmul_precision", "highest")
        device = jax.devices()[0].device_kind
        accelerator = jax.devices()[0].platform != "cpu"
    elif backend == "torch":
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        accelerator = torch.cuda.is_available()
        device = torch.cuda.get_device_name(0) if accelerator else "CPU"
    else:
        import tensorflow as tf

        tf.config.experimental.enable_tensor_float_32_execution(False)
        gpus = tf.config.list_physical_devices("GPU")
        device, accelerator = (gpus[0].name, True) if gpus else ("CPU", False)
    report = {"backend": backend, "device": device, "dtypes": {}}
    for dtype in args.dtypes:
        print(f"{backend} on {device}, {dtype}:", flush=True)
        keras.config.set_dtype_policy(dtype)
        report["dtypes"][dtype] = {"outputs": check_outputs(backend, dtype, args)}
        keras.config.set_dtype_policy("float32")
    print(f"{backend} kernels, native against reference:", flush=True)
    report["kernels"] = check_kernels(backend, args)
    if not (accelerator or args.cpu_smoke):
        report["speed"] = "skipped: no accelerator"
        return report
    print(f"{backend} throughput, bfloat16:", flush=True)
    keras.config.set_dtype_policy(SPEED_DTYPE)
    report["dtypes"].setdefault(SPEED_DTYPE, {})["throughput"] = throughput(
        backend, args, args.deadline
    )
    keras.config.set_dtype_policy("float32")
    print(f"{backend} latencies, float32:", flush=True)
    report["latencies"] = latencies(args, args.deadline)
    return report


def main():
    started_at = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backends", nargs="+", choices=BACKENDS, default=["jax", "torch"])
    parser.add_argument("--dtypes", nargs="+", choices=DTYPES, default=list(DTYPES))
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384, 32768, 65536])
    parser.add_argument("--core-lengths", type=int, nargs="+", default=[8192, 32768])
    parser.add_argument("--check-length", type=int, default=1024)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--budget-s", type=float, default=480.0, help="seconds for all backends")
    parser.add_argument("--cpu-smoke", action="store_true", help="tiny sizes, seconds on a CPU")
    parser.add_argument("--output-dir", default=None, help="folder of gpu_check_<backend>.json")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--deadline", type=float, default=float("inf"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.cpu_smoke:
        args.lengths, args.core_lengths, args.check_length = [64, 128], [64], 24
        args.dim, args.heads, args.repeats = 16, 2, 1
    if args.worker:
        print("REPORT " + json.dumps(worker(args)), flush=True)
        return
    # This process imports Keras only to write the JSON: on a machine without
    # TensorFlow, Keras' default backend would fail to import.
    os.environ.setdefault("KERAS_BACKEND", args.backends[0])
    reports = []
    for index, backend in enumerate(args.backends):
        deadline = started_at + args.budget_s * (index + 1) / len(args.backends)
        report = run_backend(backend, deadline)
        reports.append(report)
        if args.output_dir:  # after each backend, so that a run stopped early keeps what ran
            from keras_attn.utils import write_benchmark

            path = os.path.join(args.output_dir, f"gpu_check_{backend}.json")
            results = {"ok": _all_match([report]), "reports": [report]}
            write_benchmark(path, results, started_at=started_at)
    ok = _all_match(reports)
    print(f"\nall outputs match: {ok}; wall time {time.time() - started_at:.0f} s")
    sys.exit(0 if ok else 1)


def run_backend(backend, deadline):
    """Runs the worker for `backend`, printing its lines as they come."""
    command = [sys.executable, __file__, "--worker", "--deadline", str(deadline), *sys.argv[1:]]
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "2"}
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's library
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
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
    """Whether every layer output and every native kernel matched, and no backend failed."""
    rows = [
        row
        for report in reports
        for dtype in report.get("dtypes", {}).values()
        for row in dtype.get("outputs", [])
    ]
    rows += [row for report in reports for row in report.get("kernels", [])]
    return all(row["ok"] for row in rows) and not any("error" in report for report in reports)


if __name__ == "__main__":
    main()
