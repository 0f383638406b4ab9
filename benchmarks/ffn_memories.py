"""Cost of the streaming key-value memory analysis against a plain forward pass.

Times, in the same process and on the same random token batches,
`analyze_memories` over a decoder language model (all statistics, top-25
trigger tables) against the eager forward passes alone (the baseline: the
work any analysis has to do). Prints the ratio analysis / forward, and the
size of the state the analysis keeps compared to storing every coefficient.

    python benchmarks/ffn_memories.py [--batches 20 --batch 64 --length 32] [--out DIR]

Writes `ffn_memories.json` (a `meta` block and the figures under `results`)
to `--out` (default `results/benchmarks`).
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.analysis import analyze_memories  # noqa: E402
from keras_attn.analysis.ffn_memories import POSITION_STATISTICS  # noqa: E402
from keras_attn.models import build_decoder_language_model  # noqa: E402
from keras_attn.utils import finish_run  # noqa: E402

# The integer options, with their defaults; the results record their values.
SETTINGS = {
    "batches": 20,
    "batch": 64,
    "length": 32,
    "vocabulary": 5000,
    "depth": 4,
    "mlp": 512,
    "top-k": 25,
}


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    for name, default in SETTINGS.items():
        parser.add_argument(f"--{name}", type=int, default=default)
    parser.add_argument("--out", default="results/benchmarks", help="Folder for the JSON.")
    args = parser.parse_args()
    started_at = time.time()
    model = build_decoder_language_model(
        args.vocabulary,
        args.length,
        hidden_dim=128,
        num_layers=args.depth,
        intermediate_dim=args.mlp,
    )
    rng = np.random.default_rng(0)
    batches = [
        rng.integers(1, args.vocabulary, size=(args.batch, args.length)).astype("int32")
        for _ in range(args.batches)
    ]
    embedding = keras.ops.convert_to_numpy(model.get_layer("output_embedding").kernel)
    model(batches[0])  # warm up

    start = time.perf_counter()
    for tokens in batches:
        keras.ops.convert_to_numpy(model(tokens, training=False))
    forward = time.perf_counter() - start

    start = time.perf_counter()
    analyze_memories(model, ((t, t, t > 0) for t in batches), embedding, top_k=args.top_k)
    analysis = time.perf_counter() - start

    positions = args.batches * args.batch * args.length
    all_coefficients = args.depth * positions * args.mlp * 4
    tables = args.depth * args.mlp * args.top_k * (8 + 3 * 8)  # score and three indices
    per_sequence = args.batches * args.batch * args.depth * len(POSITION_STATISTICS) * 8
    kept = tables + per_sequence
    print(f"{positions} positions, {args.depth} layers x {args.mlp} memories")
    print(f"forward only (baseline): {forward:.2f} s")
    print(f"analyze_memories:        {analysis:.2f} s  ratio {analysis / forward:.2f}")
    print(
        f"state kept: {kept / 2**20:.1f} MiB vs {all_coefficients / 2**20:.1f} MiB to store "
        f"every coefficient (ratio {kept / all_coefficients:.3f}; the per-sequence counts "
        f"for the intervals, {per_sequence / 2**20:.2f} MiB, grow with the sequences only)"
    )
    results = {
        "config": {key: value for key, value in vars(args).items() if key != "out"},
        "positions": positions,
        "forward_s": forward,
        "analysis_s": analysis,
        "ratio": analysis / forward,
        "state_kept_mib": kept / 2**20,
        "per_sequence_counts_mib": per_sequence / 2**20,
        "all_coefficients_mib": all_coefficients / 2**20,
    }
    finish_run(
        args.out, "ffn_memories", {"results": results}, started_at=started_at, setting="benchmark"
    )


if __name__ == "__main__":
    main()
