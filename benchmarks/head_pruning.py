"""Throughput of MiniLM with heads really pruned, against the unpruned model.

Prunes 0, 10, ..., 90% of the 72 heads of all-MiniLM-L6-v2 (a random choice,
at least one head kept per layer: speed depends only on how many heads each
layer keeps) with `prune_heads`, and times every model in the same process,
taking turns, in graph mode. Prints sentences per second at batch 1 and 64
and the ratio to the unpruned model (above 1: faster).

    python benchmarks/head_pruning.py [--length 64] [--repeats 5] [--fractions 0 0.5 0.9]
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from keras_attn.pretrained import build_minilm_encoder  # noqa: E402
from keras_attn.pruning import measure_throughput, prune_heads, select_heads  # noqa: E402


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--length", type=int, default=64, help="Tokens per sentence.")
    parser.add_argument("--repeats", type=int, default=5, help="Timed rounds at batch 64.")
    parser.add_argument(
        "--fractions", type=float, nargs="+", default=[step / 10 for step in range(10)]
    )
    args = parser.parse_args()
    fractions = [0.0] + [fraction for fraction in args.fractions if fraction > 0]
    encoder = build_minilm_encoder()
    scores = {
        f"layer_{index}/attention": np.random.default_rng(index).random(12) for index in range(6)
    }
    models = [
        prune_heads(encoder, select_heads(scores, round(72 * fraction))) if fraction else encoder
        for fraction in fractions
    ]
    print(f"all-MiniLM-L6-v2, {args.length} tokens, graph mode; baseline: the unpruned model")
    results = {}
    for batch, repeats in ((1, 8 * args.repeats), (64, args.repeats)):
        rng = np.random.default_rng(0)
        inputs = {
            "token_ids": rng.integers(1000, 30000, (batch, args.length)).astype("int32"),
            "padding_mask": np.ones((batch, args.length), "int32"),
            "segment_ids": np.zeros((batch, args.length), "int32"),
        }
        results[batch] = measure_throughput(models, inputs, repeats)
    header = ("pruned", "heads", "batch 1 (/s)", "ratio", "batch 64 (/s)", "ratio")
    widths = (7, 6, 13, 6, 14, 6)
    print(" ".join(f"{name:>{width}}" for name, width in zip(header, widths, strict=True)))
    for index, fraction in enumerate(fractions):
        one, many = results[1][index], results[64][index]
        print(
            f"{100 * fraction:>6.0f}% {72 - round(72 * fraction):>6} {one:>13.1f} "
            f"{one / results[1][0]:>6.2f} {many:>14.1f} {many / results[64][0]:>6.2f}"
        )


if __name__ == "__main__":
    main()
