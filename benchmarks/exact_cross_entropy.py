"""Cross-entropy (bits) of the exact PARITY and FIRST transformers against length.

Chiang & Cholak (2022): the exact transformers classify every string, but
without layer norm the CLS output shrinks as the string grows, so the
cross-entropy tends to 1 bit; with layer norm and `epsilon = 0` (the paper's
limit) it is the same at every length, and a positive epsilon (`1e-5`, the
official code's and the builders' default) brings the decay back. For each
task and model, the mean cross-entropy of the true label over random strings
of each length, and the accuracy; each row records the builder arguments it
used.

    python benchmarks/exact_cross_entropy.py [--lengths 10 100 1000] [--strings 32] \
        [--output results/benchmarks/exact_cross_entropy.json]
"""

import argparse
import os
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from keras_attn.datasets import make_bit_strings  # noqa: E402
from keras_attn.models import (  # noqa: E402
    bit_string_logits,
    build_exact_first_transformer,
    build_exact_parity_transformer,
)
from keras_attn.utils import write_benchmark  # noqa: E402

BUILDERS = {"parity": build_exact_parity_transformer, "first": build_exact_first_transformer}
# Every argument that changes the numbers is given, defaults included.
MODELS = {
    "no layer norm": {"layer_norm": False},
    "layer norm, epsilon 0 (the paper's limit)": {"layer_norm": True, "layer_norm_epsilon": 0.0},
    "layer norm, epsilon 1e-5 (default)": {"layer_norm": True, "layer_norm_epsilon": 1e-5},
}


def cross_entropy_bits(model, tokens, labels, batch_size=8):
    """Mean cross-entropy (bits) of the true labels, and the accuracy."""
    logits = bit_string_logits(model, tokens, batch_size)  # (strings,)
    signed = np.where(labels > 0.5, logits, -logits)  # positive when right
    return float(np.mean(np.logaddexp(0.0, -signed)) / np.log(2)), float(np.mean(signed > 0))


def measure(lengths, strings, seed=0):
    """One row per task and model: cross-entropy and accuracy at each length."""
    rows = []
    for task, build in BUILDERS.items():
        for name, kwargs in MODELS.items():
            model = build(**kwargs)
            row = {"task": task, "model": name, "arguments": kwargs, "bits": [], "accuracy": []}
            for length in lengths:
                tokens, labels = make_bit_strings(strings, length, task, seed=seed)
                bits, accuracy = cross_entropy_bits(model, tokens, labels)
                row["bits"].append(bits)
                row["accuracy"].append(accuracy)
            print(f"{task:>6} {name:<41} " + " ".join(f"{b:.4f}" for b in row["bits"]))
            rows.append(row)
    return rows


def main():
    started_at = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", type=int, nargs="+", default=[10, 30, 100, 300, 1000])
    parser.add_argument("--strings", type=int, default=32, help="random strings per length")
    parser.add_argument("--output", default=None, help="JSON file for the results")
    args = parser.parse_args()
    rows = measure(args.lengths, args.strings)
    if args.output:
        results = {"lengths": args.lengths, "strings": args.strings, "rows": rows}
        write_benchmark(args.output, results, started_at=started_at)


if __name__ == "__main__":
    main()
