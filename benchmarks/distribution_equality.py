"""Distributed training equals single-device training: the measured differences.

Runs the scenarios of `tests/distribution` (2 virtual CPU devices on JAX,
2 logical CPUs for `tf.distribute.MirroredStrategy`), each in a fresh
interpreter, with XLA's default optimization level, and writes
`results/distribution.json`:

- data parallel (JAX `DataParallel`): a LogSparse forecaster and a ViT,
  3 SGD steps on the same global batch of 8, distributed and on one device;
  largest difference of the step losses and of the final weights.
- head parallel (JAX `ModelParallel` with `head_parallel_layout_map`):
  BERT encoder, ViT, BSARec; largest difference of the outputs and of the
  gradients, and the layout of every kernel the map shards.
- MirroredStrategy: a ViT, with and without XLA.

    python benchmarks/distribution_equality.py [--out results]
"""

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

from keras_attn.utils import run_metadata, write_results

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCENARIOS = ROOT / "tests" / "distribution"


def run_scenario(script):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "2"}
    env.pop("XLA_FLAGS", None)
    completed = subprocess.run(
        [sys.executable, str(SCENARIOS / script)],
        capture_output=True,
        text=True,
        check=True,
        env=env,
        cwd=ROOT,
    )
    line = next(line for line in completed.stdout.splitlines() if line.startswith("RESULT "))
    return json.loads(line.removeprefix("RESULT "))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=str(ROOT / "results"))
    args = parser.parse_args()
    start = time.time()
    jax_results = run_scenario("jax_scenarios.py")
    results = {
        "devices": jax_results["devices"],
        "data_parallel": jax_results["data_parallel"],
        "head_parallel": jax_results["head_parallel"],
        "mirrored_strategy": run_scenario("tf_scenarios.py"),
    }
    paths = write_results(
        args.out, "distribution", {"meta": run_metadata(start, "benchmark"), "results": results}
    )
    print(f"wrote {paths['json']}")


if __name__ == "__main__":
    main()
