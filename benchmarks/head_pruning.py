"""Throughput of a transformer with heads really pruned, against the unpruned model.

`--model` picks the transformer:

- `minilm` (default): all-MiniLM-L6-v2, keras_attn's BERT encoder with the
  pretrained weights; 0, 10, ..., 90% of its 72 heads pruned.
- `keras-hub-bert`: KerasHub's `BertBackbone` at the size of BERT-base (12
  blocks of 12 heads, width 768), built from its constructor with random
  weights (nothing is downloaded); 50% of its 144 heads pruned by default.
  `prune_heads` converts the blocks it prunes (`convert_attention`), so the
  same backbone converted with no head removed is timed too: it separates
  what the conversion changes from what pruning gains.

Heads are chosen at random, at least one kept per layer (speed depends only
on how many heads each layer keeps). Every model is timed in the same
process, taking turns, in graph mode (`measure_throughput`), at batch 1 and
64. Prints sentences per second and the ratio to the unpruned model (above
1: faster), and writes `head_pruning_<model>.json` (a `meta` block and the
rows under `results`) to `--out`.

    python benchmarks/head_pruning.py [--model keras-hub-bert] [--length 64] [--repeats 5]
        [--fractions 0 0.5 0.9] [--out results/benchmarks]
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402

from keras_attn.interop import convert_attention  # noqa: E402
from keras_attn.pruning import (  # noqa: E402
    attention_layers,
    measure_throughput,
    prune_heads,
    select_heads,
)
from keras_attn.utils import finish_run  # noqa: E402

BERT_BASE = {"num_layers": 12, "num_heads": 12, "hidden_dim": 768, "intermediate_dim": 3072}
DEFAULT_FRACTIONS = {"minilm": [step / 10 for step in range(10)], "keras-hub-bert": [0.5]}


def keras_hub_bert(**sizes):
    """KerasHub's `BertBackbone` with random weights, BERT-base by default."""
    import keras_hub

    return keras_hub.models.BertBackbone(
        vocabulary_size=30522, max_sequence_length=512, **{**BERT_BASE, **sizes}
    )


def minilm():
    from keras_attn.pretrained import build_minilm_encoder

    return build_minilm_encoder()


def pruned_variants(model, fractions, convert=False):
    """`[(label, model)]`: `model`, optionally its converted copy, and each fraction pruned."""
    layers = attention_layers(model)
    scores = {
        name: np.random.default_rng(index).random(layer.num_heads)
        for index, (name, layer) in enumerate(layers.items())
    }
    total = sum(layer.num_heads for layer in layers.values())
    variants = [("unpruned", model)]
    if convert:
        variants.append(("converted, unpruned", convert_attention(model)))
    for fraction in fractions:
        if fraction > 0:
            removed = select_heads(scores, round(total * fraction))
            variants.append((f"{100 * fraction:.0f}% pruned", prune_heads(model, removed)))
    return variants


def measure(variants, length, repeats, vocabulary_size):
    """One row per model: its heads, parameters and sentences per second at batch 1 and 64."""
    speeds = {}
    for batch, rounds in ((1, 8 * repeats), (64, repeats)):
        rng = np.random.default_rng(0)
        inputs = {
            "token_ids": rng.integers(1, vocabulary_size, (batch, length)).astype("int32"),
            "padding_mask": np.ones((batch, length), "int32"),
            "segment_ids": np.zeros((batch, length), "int32"),
        }
        speeds[batch] = measure_throughput([model for _, model in variants], inputs, rounds)
    rows = []
    for index, (label, model) in enumerate(variants):
        row = {
            "model": label,
            "heads": sum(layer.num_heads for layer in attention_layers(model).values()),
            "parameters": model.count_params(),
        }
        for batch, speed in speeds.items():
            row[f"batch_{batch}_per_s"] = speed[index]
            row[f"batch_{batch}_ratio"] = speed[index] / speed[0]
        rows.append(row)
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(DEFAULT_FRACTIONS), default="minilm")
    parser.add_argument("--length", type=int, default=64, help="Tokens per sentence.")
    parser.add_argument("--repeats", type=int, default=5, help="Timed rounds at batch 64.")
    parser.add_argument("--fractions", type=float, nargs="+", help="Shares of heads pruned.")
    parser.add_argument("--out", default="results/benchmarks", help="Folder for the JSON.")
    args = parser.parse_args(argv)
    started_at = time.time()
    fractions = args.fractions or DEFAULT_FRACTIONS[args.model]
    if args.model == "minilm":
        model, title = minilm(), "all-MiniLM-L6-v2"
    else:
        model, title = keras_hub_bert(), "KerasHub BertBackbone, BERT-base size, random weights"
    variants = pruned_variants(model, fractions, convert=args.model == "keras-hub-bert")
    rows = measure(variants, args.length, args.repeats, vocabulary_size=30522)
    print(f"{title}, {args.length} tokens, graph mode; baseline: the unpruned model")
    print(
        f"{'model':>20} {'heads':>6} {'parameters':>11} {'batch 1 (/s)':>13} {'ratio':>6} "
        f"{'batch 64 (/s)':>14} {'ratio':>6}"
    )
    for row in rows:
        print(
            f"{row['model']:>20} {row['heads']:>6} {row['parameters']:>11,} "
            f"{row['batch_1_per_s']:>13.1f} {row['batch_1_ratio']:>6.2f} "
            f"{row['batch_64_per_s']:>14.1f} {row['batch_64_ratio']:>6.2f}"
        )
    config = {"model": args.model, "length": args.length, "repeats": args.repeats}
    name = f"head_pruning_{args.model.replace('-', '_')}"
    finish_run(
        args.out,
        name,
        {"results": {"config": config, "rows": rows}},
        started_at=started_at,
        setting="benchmark",
    )


if __name__ == "__main__":
    main()
