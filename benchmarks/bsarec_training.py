"""Training throughput of BSARec and SASRec, with and without XLA.

Times `model.fit` on MovieLens-100K-sized inputs (1,682 items, left-padded
histories of length 50, batch 256, random item ids) for `build_sasrec` and
`build_bsarec` at the official defaults (hidden 64, 2 blocks, 2 heads,
dropout 0.5), compiled as a `tf.function` graph (`jit_compile=False`) and
under XLA (`jit_compile=True`). Each setting runs in the same process after
one warm-up epoch; prints sequences per second.

    python benchmarks/bsarec_training.py [--steps 30] [--out results/benchmarks]

Writes `bsarec_training.json` (a `meta` block, the load at the start and the
rows) to `--out`.
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.models import build_bsarec, build_sasrec  # noqa: E402
from keras_attn.utils import finish_run  # noqa: E402

NUM_ITEMS = 1682


def sequences_per_second(model, inputs, targets, batch_size, jit_compile):
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    warm = 2 * batch_size
    model.fit(inputs[:warm], targets[:warm], batch_size=batch_size, epochs=1, verbose=0)
    start = time.perf_counter()
    model.fit(inputs, targets, batch_size=batch_size, epochs=1, verbose=0)
    return len(inputs) / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=30, help="Timed training steps.")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-length", type=int, default=50)
    parser.add_argument("--out", default="results/benchmarks", help="Folder for the JSON.")
    args = parser.parse_args()
    started_at = time.time()
    load_at_start = [round(value, 2) for value in os.getloadavg()]
    rng = np.random.default_rng(0)
    size = args.steps * args.batch_size
    inputs = rng.integers(0, NUM_ITEMS + 1, (size, args.max_length)).astype("int32")
    targets = rng.integers(1, NUM_ITEMS + 1, size).astype("int32")
    builders = {
        "SASRec": lambda: build_sasrec(NUM_ITEMS, args.max_length, seed=0),
        "BSARec": lambda: build_bsarec(NUM_ITEMS, args.max_length, seed=0),
    }
    rows = []
    for name, builder in builders.items():
        for jit_compile in (False, True):
            keras.utils.set_random_seed(0)
            speed = sequences_per_second(builder(), inputs, targets, args.batch_size, jit_compile)
            rows.append({"model": name, "jit_compile": jit_compile, "sequences_per_s": speed})
            print(f"{name} jit_compile={jit_compile}: {speed:.0f} sequences/s", flush=True)
    config = {"steps": args.steps, "batch_size": args.batch_size, "max_length": args.max_length}
    results = {"config": config, "load_average_at_start": load_at_start, "rows": rows}
    finish_run(
        args.out,
        "bsarec_training",
        {"results": results},
        started_at=started_at,
        setting="benchmark",
    )


if __name__ == "__main__":
    main()
