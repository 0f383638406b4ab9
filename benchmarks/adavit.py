"""Latency, MACs and accuracy of the AdaViT fast path against the same full ViT.

For each token count (patch 4 on 28x28 Fashion-MNIST: 49 patches; patch 2:
196, where attention costs more), pretrains a small ViT, then trains it on
two ways for the same number of fine-tuning epochs: as the full ViT (the
baseline) and as an AdaViT at usage target γ. Every policy runs through the
XLA-compiled fast path: the learned gates, and imposed keep rates (each
example keeps the same share of patches, of heads in each block and of
attention and MLP sub-layers, at random positions, on the same fine-tuned
AdaViT). The full ViT, compiled with XLA, and every policy's fast path are
timed in the same process in interleaved rounds (`batch_latency_ms`, the
median over rounds) at batch 1 and batch 64.

Each case reports, side by side: the accuracy of the full ViT and of the
fast path, the latency ratio full / fast path (above 1: the fast path is
faster) and the MAC ratio full / fast path. The target: at least 1.5x
faster at both batch sizes at no more than 1 point of accuracy loss.

Two bounds are measured in the same rounds, from the model's ungated part
(patch embedding, first block and head, which every policy runs): the
ceiling, full / ungated part, the ratio if every gated block were skipped
at no cost; and the ideal ratio of each policy, if the gated blocks took
time in proportion to the MACs the policy keeps there and deciding cost
nothing. An imposed keep rate of 0 measures what deciding alone costs. The
results go to `--output` as JSON; `--small` is a seconds-long smoke run.

    python benchmarks/adavit.py [--gamma 0.5] [--keep-rates 0.5 0.3 0] [--small]
"""

import argparse
import os
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.datasets import load_fashion_mnist  # noqa: E402
from keras_attn.models import finetune_adavit, finetune_vit, pretrain_vit  # noqa: E402
from keras_attn.models.adavit import xla_function  # noqa: E402
from keras_attn.utils import batch_latency_ms, write_benchmark  # noqa: E402

PATCH_SIZES = (4, 2)  # 49 and 196 patches of a 28x28 image
BATCHES = (1, 64)
SIZES = {
    "default": {
        "model": {"hidden_dim": 32, "num_layers": 5, "num_heads": 4, "intermediate_dim": 64},
        "buckets": {},  # the fast path's defaults
        "train": 4000,
        "test": 1024,
        # Per patch size: pretraining and fine-tuning epochs of 32 steps. After about
        # 100 fine-tuning steps the gates are near their usage targets.
        "epochs": {4: (4, 3), 2: (2, 2)},
        "rounds": {1: 60, 64: 6},
    },
    "small": {
        "model": {"hidden_dim": 16, "num_layers": 2, "num_heads": 2, "intermediate_dim": 32},
        "buckets": {"token_buckets": 2, "head_buckets": 1},
        "train": 128,
        "test": 128,
        "epochs": {4: (1, 1), 2: (1, 1)},
        "rounds": {1: 2, 64: 1},
    },
}


def load_data(train, test):
    """Fashion-MNIST scaled to `[0, 1]`: `((x_train, y_train), (x_test, y_test))`."""
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist(limit=max(train, test))
    return (
        (x_train[:train].astype("float32") / 255.0, y_train[:train].astype("int32")),
        (x_test[:test].astype("float32") / 255.0, y_test[:test].astype("int32")),
    )


def measure(patch_size, size, args, data):
    """Every case of one token count: a list of dicts, one per policy and batch size."""
    (x_train, y_train), (x_test, y_test) = data
    pretrain_epochs, finetune_epochs = size["epochs"][patch_size]
    model = dict(size["model"], patch_size=patch_size)
    vit = pretrain_vit(x_train, y_train, 10, pretrain_epochs, seed=args.seed, **model)
    full = finetune_vit(vit, x_train, y_train, finetune_epochs, seed=args.seed)
    adavit = finetune_adavit(vit, x_train, y_train, args.gamma, finetune_epochs, seed=args.seed)
    fast = adavit.fast_path(**size["buckets"])
    ungated = _ungated_part(adavit)
    full_accuracy = _accuracy(full.predict(x_test, batch_size=256, verbose=0), y_test)
    policies = {f"learned γ={args.gamma}": None}
    for rate in args.keep_rates:
        policies[f"imposed keep {rate}"] = adavit.random_decisions(len(x_test), rate, args.seed)
    evaluated = {
        name: fast.run(x_test, decisions, batch_size=max(BATCHES))
        for name, decisions in policies.items()
    }
    tokens = adavit.stem.output.shape[1] - 1
    print(f"\n{tokens} patches: full ViT accuracy {full_accuracy:.4f}, {model}")
    cases = []
    for batch in BATCHES:
        predictors = {"full (XLA)": xla_function(full), "ungated": xla_function(ungated)}
        for name, decisions in policies.items():
            predictors[name] = _fast_predictor(fast, decisions, batch)
        ms = batch_latency_ms(predictors, x_test, batch, size["rounds"][batch])
        for name, result in evaluated.items():
            case = {
                "patches": tokens,
                "patch_size": patch_size,
                "policy": name,
                "keep_rate": None if policies[name] is None else float(name.split()[-1]),
                "batch": batch,
                "usage": {key: float(np.mean(value)) for key, value in result.decisions.items()},
                "full_accuracy": full_accuracy,
                "fast_accuracy": _accuracy(result.outputs, y_test),
                "full_ms": ms["full (XLA)"],
                "fast_ms": ms[name],
                "full_macs": int(fast.full_macs()),
                "fast_macs": float(result.macs.mean()),
            }
            case["accuracy_change_points"] = 100 * (case["fast_accuracy"] - full_accuracy)
            case["speedup"] = case["full_ms"] / case["fast_ms"]
            case["mac_ratio"] = case["full_macs"] / case["fast_macs"]
            _add_bounds(case, ms["ungated"], fast.fixed_macs())
            _print_case(case)
            cases.append(case)
    return cases


def _ungated_part(adavit):
    """The part of the model that every policy runs: stem, first block and readout."""
    images = keras.Input(adavit.stem.input.shape[1:])
    outputs = adavit.readout(adavit.blocks[0](adavit.stem(images)))  # (batch, classes)
    return keras.Model(images, outputs, name="ungated_part")


def _add_bounds(case, ungated_ms, fixed_macs):
    """The ceiling and the ideal latency ratio of a case (see the module docstring)."""
    gated_share = (case["fast_macs"] - fixed_macs) / (case["full_macs"] - fixed_macs)
    gated_ms = case["full_ms"] - ungated_ms
    case["ungated_ms"] = ungated_ms
    case["gated_mac_share"] = gated_share
    case["ceiling_speedup"] = case["full_ms"] / ungated_ms
    case["ideal_speedup"] = case["full_ms"] / (ungated_ms + gated_share * gated_ms)


def _fast_predictor(fast, decisions, batch):
    """The fast path's compiled call on one batch, with the first `batch` imposed decisions."""
    compiled = fast.compiled_function(fixed_decisions=decisions is not None)
    if decisions is None:
        return compiled
    fixed = {key: value[:batch].astype("float32") for key, value in decisions.items()}
    return lambda images: compiled(images, fixed)


def _accuracy(probabilities, labels):
    return float(np.mean(np.argmax(probabilities, -1) == labels))


def _print_case(case):
    print(
        f"batch {case['batch']:>2} {case['policy']:>20}: accuracy {case['fast_accuracy']:.4f} "
        f"({case['accuracy_change_points']:+.2f} points), {case['full_ms']:.2f} / "
        f"{case['fast_ms']:.2f} ms = {case['speedup']:.2f}x faster, "
        f"MACs {case['mac_ratio']:.2f}x fewer; ideal {case['ideal_speedup']:.2f}x, "
        f"ceiling {case['ceiling_speedup']:.2f}x",
        flush=True,
    )


def main(argv=None):
    started_at = time.time()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gamma", type=float, default=0.5, help="usage target of the AdaViT")
    parser.add_argument(
        "--keep-rates",
        type=float,
        nargs="+",
        default=[0.5, 0.3, 0.0],
        help="imposed keep rates; 0 switches every gated sub-layer off",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--small", action="store_true", help="a seconds-long smoke run")
    parser.add_argument("--output", default="results/benchmarks/adavit.json")
    args = parser.parse_args(argv)
    size = SIZES["small" if args.small else "default"]
    data = load_data(size["train"], size["test"])
    cases = [case for patch in PATCH_SIZES for case in measure(patch, size, args, data)]
    settings = {key: value for key, value in size.items() if key not in ("epochs", "rounds")}
    settings.update(
        gamma=args.gamma,
        keep_rates=args.keep_rates,
        seed=args.seed,
        small=args.small,
        epochs={str(patch): epochs for patch, epochs in size["epochs"].items()},
        rounds={str(batch): rounds for batch, rounds in size["rounds"].items()},
    )
    write_benchmark(args.output, {"settings": settings, "cases": cases}, started_at=started_at)


if __name__ == "__main__":
    main()
