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
nothing. At batch 1 a second ideal ratio counts the MACs the fast path
computes (`AdaViTFastPath.computed_macs`: the kept tokens padded to their
bucket's capacity, the heads to their head bucket's, every head with one
head bucket), and `of_computed_ideal` is the measured ratio over it. An
imposed keep rate of 0 measures what deciding alone costs. The results go
to `--output` as JSON; `--small` is a seconds-long smoke run.

`--paper-scale` times the paper's backbones instead: DeiT-S (224 px, patch
16, width 384, 12 blocks, 6 heads, MLP 1536) and T2T-ViT-19, untrained (the
latency does not depend on the weights), at batch 1 and 64, under the
decisions of a keep rate chosen so that the fast path spends `--mac-ratio`
(2 by default, the paper's Ada-DeiT-S: 2.3 of 4.6 GMACs) times fewer MACs
than the full model: imposed ones (every example keeps the same share of
each kind, at random positions) and random ones of the same usage (each
decision drawn on its own, so that the examples differ). Each case is
written to `--output` as soon as it is measured, with the seconds of each
predictor's first call (the fast path's includes its XLA compilation, which
grows with the number of branches: `--token-buckets` x `--head-buckets`
attention branches per gated block); `settings.partial` stays true until
every case is measured, and `--resume` skips the cases already there.
`--paper-scale --small` is a smoke run of tiny stand-ins.

    python benchmarks/adavit.py [--gamma 0.5] [--keep-rates 0.5 0.3 0] [--small]
    KERAS_BACKEND=jax python benchmarks/adavit.py --paper-scale --resume \
        --output results/benchmarks/adavit_paper_scale_jax.json
    python benchmarks/adavit.py --paper-scale --head-buckets 1 \
        --output results/benchmarks/adavit_paper_scale_tensorflow_every_head.json

`--head-buckets 1` computes every head and zeroes the off ones instead of
gathering the kernels to the kept heads (see `AdaViTFastPath`).

On torch, which has no XLA, the full model and the fast path both run
eagerly without gradients (`inference_function`): the user's model as
they would call it, against the fast path's eager form, which runs each
sub-layer on the examples that run it at their largest kept count.

    KERAS_BACKEND=torch python benchmarks/adavit.py --paper-scale \
        --output results/benchmarks/adavit_paper_scale_torch.json
"""

import argparse
import json
import os
import pathlib
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.datasets import load_fashion_mnist  # noqa: E402
from keras_attn.models import (  # noqa: E402
    AdaViT,
    build_t2t_vit,
    build_vision_transformer,
    finetune_adavit,
    finetune_vit,
    pretrain_vit,
)
from keras_attn.models.adavit import DECISION_KEYS, inference_function  # noqa: E402
from keras_attn.utils import batch_latency_ms, write_benchmark  # noqa: E402
from keras_attn.utils.results import set_aside  # noqa: E402
from keras_attn.utils.training import top1_accuracy  # noqa: E402

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


# The paper's backbones, untrained, and tiny stand-ins for the smoke run.
PAPER_BACKBONES = {
    "default": {
        "deit_s": lambda: build_vision_transformer(
            (224, 224, 3), 1000, variant="vit_small", patch_size=16, name="deit_s"
        ),
        "t2t_vit_19": lambda: build_t2t_vit(variant="t2t_vit_19"),
    },
    "small": {
        "deit_s": lambda: build_vision_transformer(
            (32, 32, 3), 10, patch_size=8, hidden_dim=16, num_layers=3, num_heads=2,
            intermediate_dim=32, name="deit_s",
        ),
        "t2t_vit_19": lambda: build_t2t_vit(
            (32, 32, 3), 10, variant=None, hidden_dim=16, num_layers=3, num_heads=2,
            intermediate_dim=32, token_dim=8, token_layer="transformer",
        ),
    },
}  # fmt: skip
PAPER_ROUNDS = {"default": {1: 20, 64: 3}, "small": {1: 2, 64: 1}}


def measure_paper_scale(name, size, args, done):
    """Yields the cases of one paper backbone not in `done`, one batch size at a time."""
    keras.utils.set_random_seed(args.seed)
    backbone = PAPER_BACKBONES[size][name]()
    images = np.random.default_rng(args.seed).normal(size=(max(BATCHES), *backbone.input.shape[1:]))
    images = images.astype("float32")
    adavit = AdaViT(backbone, seed=args.seed)
    adavit(images[:1])  # builds the gates
    fast = adavit.fast_path(**paper_buckets(size, args))
    rate = keep_rate_for_mac_ratio(adavit, fast, args.mac_ratio, len(images), args.seed)
    policies = {
        "imposed": adavit.random_decisions(len(images), rate, seed=args.seed),
        "random": independent_decisions(adavit, len(images), rate, seed=args.seed),
    }
    full, ungated = inference_function(backbone), inference_function(_ungated_part(adavit))
    for batch in BATCHES:
        if (name, batch) in done:
            continue
        predictors = {"full": full, "ungated": ungated}
        for policy, decisions in policies.items():
            predictors[policy] = _fast_predictor(fast, decisions, batch)
        first_call_s = _first_call_seconds(predictors, images[:batch])
        ms = batch_latency_ms(predictors, images, batch, PAPER_ROUNDS[size][batch])
        cases = []
        for policy, decisions in policies.items():
            used = {key: value[:batch] for key, value in decisions.items()}
            case = _case(fast, adavit, ms, policy, batch, used, backbone=name)
            case["tokens"] = adavit.stem.output.shape[1]
            case["keep_rate"] = rate
            case["first_call_s"] = {
                "full": first_call_s["full"],
                "fast": first_call_s[policy],  # the first policy's includes the compilation
            }
            _print_case(case)
            cases.append(case)
        yield cases


def paper_buckets(size, args):
    """The fast path's token and head buckets of a `--paper-scale` run."""
    if size == "small":
        return {"token_buckets": 1, "head_buckets": 1}  # few branches: a quick smoke run
    return {"token_buckets": args.token_buckets, "head_buckets": args.head_buckets}


def _first_call_seconds(predictors, batch):
    """Seconds of each predictor's first call on `batch`: compilation included."""
    seconds = {}
    for name, predict in predictors.items():
        started = time.perf_counter()
        predict(batch)
        seconds[name] = time.perf_counter() - started
    return seconds


def keep_rate_for_mac_ratio(adavit, fast, mac_ratio, batch, seed):
    """The keep rate, one for every kind, whose imposed decisions cut the MACs `mac_ratio` times."""
    low, high = 0.0, 1.0
    for _ in range(20):  # bisection: fewer kept, fewer MACs
        rate = (low + high) / 2
        macs = fast.macs(adavit.random_decisions(batch, rate, seed=seed)).mean()
        low, high = (rate, high) if fast.full_macs() / macs > mac_ratio else (low, rate)
    return (low + high) / 2


def independent_decisions(adavit, batch, rate, seed):
    """Decisions drawn one by one, kept with probability `rate`, in the layout of `decide`."""
    rng = np.random.default_rng(seed + 1)
    shapes = {key: value.shape for key, value in adavit.random_decisions(1, rate).items()}
    decisions = {key: rng.random((batch, *shape[1:])) < rate for key, shape in shapes.items()}
    for key in DECISION_KEYS[1:]:  # the first block has no head or block gate
        decisions[key][:, : 1 - adavit.first_gated] = True
    return decisions


def _done_cases(path):
    """`(backbone, batch)` of the cases in the output file, and the cases, for `--resume`.

    An output file that cannot be read is set aside, and every case is measured again.
    """
    if not path.exists():
        return set(), []
    try:
        cases = json.loads(path.read_bytes())["results"]["cases"]
        return {(case["backbone"], case["batch"]) for case in cases}, cases
    except (ValueError, KeyError, TypeError) as error:  # not JSON, or not a result's
        set_aside(path, f"{type(error).__name__}: {error}")
        return set(), []


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
    full_accuracy = top1_accuracy(full.predict(x_test, batch_size=256, verbose=0), y_test)
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
        predictors = {"full": inference_function(full), "ungated": inference_function(ungated)}
        for name, decisions in policies.items():
            predictors[name] = _fast_predictor(fast, decisions, batch)
        ms = batch_latency_ms(predictors, x_test, batch, size["rounds"][batch])
        for name, result in evaluated.items():
            case = _case(fast, adavit, ms, name, batch, result.decisions, patches=tokens)
            case.update(
                patch_size=patch_size,
                keep_rate=None if policies[name] is None else float(name.split()[-1]),
                full_accuracy=full_accuracy,
                fast_accuracy=top1_accuracy(result.outputs, y_test),
            )
            case["accuracy_change_points"] = 100 * (case["fast_accuracy"] - full_accuracy)
            _print_case(case)
            cases.append(case)
    return cases


def _ungated_part(adavit):
    """The part of the model that every policy runs: stem, ungated blocks and readout."""
    images = keras.Input(adavit.stem.input.shape[1:])
    x = adavit.stem(images)  # (batch, tokens, dim)
    for block in adavit.blocks[: adavit.first_gated]:
        x = block(x)
    return keras.Model(images, adavit.readout(x), name="ungated_part")


def _case(fast, adavit, ms, policy, batch, decisions, **identity):
    """A measured case: usage, latencies, MACs, their ratios and the bounds of the ratio."""
    case = dict(identity, policy=policy, batch=batch, usage=adavit.usage(decisions))
    case.update(full_ms=ms["full"], fast_ms=ms[policy])
    case.update(full_macs=int(fast.full_macs()), fast_macs=float(fast.macs(decisions).mean()))
    case["speedup"] = case["full_ms"] / case["fast_ms"]
    case["mac_ratio"] = case["full_macs"] / case["fast_macs"]
    _add_bounds(case, ms["ungated"], fast.fixed_macs())
    if batch == 1:  # a batch of one computes at its own bucket capacities
        computed = float(fast.computed_macs(decisions).mean())
        case["computed_macs"] = computed
        case["computed_ideal_speedup"] = _ideal_speedup(case, computed, fast.fixed_macs())
        case["of_computed_ideal"] = case["speedup"] / case["computed_ideal_speedup"]
    return case


def _add_bounds(case, ungated_ms, fixed_macs):
    """The ceiling and the ideal latency ratio of a case (see the module docstring)."""
    case["ungated_ms"] = ungated_ms
    case["gated_mac_share"] = _gated_share(case, case["fast_macs"], fixed_macs)
    case["ceiling_speedup"] = case["full_ms"] / ungated_ms
    case["ideal_speedup"] = _ideal_speedup(case, case["fast_macs"], fixed_macs)


def _gated_share(case, macs, fixed_macs):
    """The share of the gated blocks' MACs that `macs` per example keeps."""
    return (macs - fixed_macs) / (case["full_macs"] - fixed_macs)


def _ideal_speedup(case, macs, fixed_macs):
    """Full / fast path if the gated blocks took time in proportion to `macs` per example."""
    gated_ms = case["full_ms"] - case["ungated_ms"]
    return case["full_ms"] / (case["ungated_ms"] + _gated_share(case, macs, fixed_macs) * gated_ms)


def _fast_predictor(fast, decisions, batch):
    """The fast path's compiled call on one batch, with the first `batch` imposed decisions."""
    if decisions is None:
        return fast.predictor()
    return fast.predictor({key: value[:batch] for key, value in decisions.items()})


def _print_case(case):
    accuracy = ""
    if "fast_accuracy" in case:
        accuracy = (
            f"accuracy {case['fast_accuracy']:.4f} ({case['accuracy_change_points']:+.2f} points), "
        )
    print(
        f"{case.get('backbone', case.get('patches'))} batch {case['batch']:>2} "
        f"{case['policy']:>20}: {accuracy}{case['full_ms']:.2f} / "
        f"{case['fast_ms']:.2f} ms = {case['speedup']:.2f}x faster, "
        f"MACs {case['mac_ratio']:.2f}x fewer; ideal {case['ideal_speedup']:.2f}x, "
        f"ceiling {case['ceiling_speedup']:.2f}x"
        + (f"; {case['of_computed_ideal']:.0%} of computed ideal" if case["batch"] == 1 else ""),
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
    parser.add_argument(
        "--paper-scale", action="store_true", help="DeiT-S and T2T-ViT-19 at 224 px, untrained"
    )
    parser.add_argument(
        "--mac-ratio", type=float, default=2.0, help="full / fast-path MACs of --paper-scale"
    )
    parser.add_argument(
        "--token-buckets", type=int, default=4, help="token capacities of --paper-scale (4)"
    )
    parser.add_argument(
        "--head-buckets", type=int, default=None, help="head capacities of --paper-scale"
    )
    parser.add_argument("--resume", action="store_true", help="skip the cases in --output")
    parser.add_argument("--output", default=None)
    args = parser.parse_args(argv)
    if args.paper_scale:
        return paper_scale(args, started_at)
    args.output = args.output or "results/benchmarks/adavit.json"
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


def paper_scale(args, started_at):
    """The `--paper-scale` run: each case written to the output as soon as it is measured."""
    size = "small" if args.small else "default"
    backend = keras.backend.backend()
    path = pathlib.Path(args.output or f"results/benchmarks/adavit_paper_scale_{backend}.json")
    done, cases = _done_cases(path) if args.resume else (set(), [])
    settings = {
        "backbones": list(PAPER_BACKBONES[size]),
        "backend": backend,
        "mac_ratio": args.mac_ratio,
        "seed": args.seed,
        "small": args.small,
        "rounds": {str(batch): rounds for batch, rounds in PAPER_ROUNDS[size].items()},
    }
    settings.update(paper_buckets(size, args), partial=True)  # until every case is measured
    for name in PAPER_BACKBONES[size]:
        for measured in measure_paper_scale(name, size, args, done):
            cases += measured
            write_benchmark(path, {"settings": settings, "cases": cases}, started_at=started_at)
    settings["partial"] = False
    write_benchmark(path, {"settings": settings, "cases": cases}, started_at=started_at)


if __name__ == "__main__":
    main()
