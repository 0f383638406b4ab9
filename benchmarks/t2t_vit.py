"""Forward throughput of T2T-ViT-7 at 224 pixels: XLA against eager execution.

Builds T2T-ViT-7 (1000 classes), then times its inference forward pass
eagerly (the baseline: `model(x)` op by op) and compiled with XLA
(`tf.function(jit_compile=True)`), on the same weights and inputs in the same
process. Prints images per second and the ratio XLA / eager (above 1: XLA is
faster), plus the analytic GMACs per image.

    python benchmarks/t2t_vit.py [--batch 4] [--repeats 5] [--variant t2t_vit_7] [--out DIR]

Writes `t2t_vit.json` (a `meta` block and the figures under `results`) to
`--out` (default `results/benchmarks`).
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

from keras_attn.models import build_t2t_vit, count_macs  # noqa: E402
from keras_attn.utils import finish_run, median_seconds  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="t2t_vit_7")
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--image-size", type=int, default=224)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--out", default="results/benchmarks", help="Folder for the JSON.")
    args = parser.parse_args()
    started_at = time.time()
    size = args.image_size
    model = build_t2t_vit((size, size, 3), 1000, variant=args.variant)
    x = tf.random.normal((args.batch, size, size, 3), seed=0)
    xla = tf.function(lambda images: model(images, training=False), jit_compile=True)
    np.testing.assert_allclose(xla(x).numpy(), model(x, training=False).numpy(), atol=1e-4)
    print(f"{args.variant}, {size} px, batch {args.batch}, median of {args.repeats} calls")
    print(f"GMACs per image (analytic): {count_macs(model) / 1e9:.2f}")
    eager_time, xla_time = median_seconds(
        [lambda: model(x, training=False), lambda: xla(x)], args.repeats
    )
    print(f"{'mode':>6} {'ms / batch':>11} {'images / s':>11}")
    for mode, seconds in (("eager", eager_time), ("XLA", xla_time)):
        print(f"{mode:>6} {seconds * 1e3:>11.1f} {args.batch / seconds:>11.1f}")
    print(f"XLA / eager throughput: {eager_time / xla_time:.2f}x")
    results = {
        "variant": args.variant,
        "image_size": size,
        "batch": args.batch,
        "repeats": args.repeats,
        "gmacs_per_image": count_macs(model) / 1e9,
        "eager_ms": eager_time * 1e3,
        "xla_ms": xla_time * 1e3,
        "xla_speedup": eager_time / xla_time,
    }
    finish_run(
        args.out, "t2t_vit", {"results": results}, started_at=started_at, setting="benchmark"
    )


if __name__ == "__main__":
    main()
