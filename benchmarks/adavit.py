"""Inference latency of the AdaViT fast path against the full ViT.

Pretrains a small ViT (the one of `keras-attn reproduce adavit`) on Fashion-MNIST, fine-tunes AdaViT
at one usage target γ and times, in interleaved rounds in one process, the
full ViT compiled with XLA (the baseline) and the AdaViT fast path (XLA),
at batch 1 and 64. Prints the accuracies and the ratios baseline / fast path
(above 1: the fast path is faster). Target: at least 1.5x faster at no more
than 1 point accuracy loss.

    python benchmarks/adavit.py [--gamma 0.5] [--train 3000] [--epochs 4 3]
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

from keras_attn.datasets import load_fashion_mnist  # noqa: E402
from keras_attn.models import finetune_adavit, pretrain_vit  # noqa: E402
from keras_attn.models.adavit_fast_path import xla_function  # noqa: E402
from keras_attn.utils import batch_latency_ms  # noqa: E402

# The ViT of the AdaViT reproduction: 49 patches of 4x4 pixels.
MODEL = {"patch_size": 4, "hidden_dim": 32, "num_layers": 5, "num_heads": 4, "intermediate_dim": 64}


def load_data(train, test):
    """Fashion-MNIST scaled to `[0, 1]`: `((x_train, y_train), (x_test, y_test))`."""
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist(limit=max(train, test))
    return (
        (x_train[:train].astype("float32") / 255.0, y_train[:train]),
        (x_test[:test].astype("float32") / 255.0, y_test[:test]),
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gamma", type=float, default=0.5)
    parser.add_argument("--train", type=int, default=3000)
    parser.add_argument("--test", type=int, default=1000)
    parser.add_argument("--epochs", type=int, nargs=2, default=[4, 3], help="pretrain, fine-tune")
    parser.add_argument("--rounds", type=int, nargs=2, default=[100, 8], help="batch 1, batch 64")
    args = parser.parse_args()
    (x_train, y_train), (x_test, y_test) = load_data(args.train, args.test)
    vit = pretrain_vit(x_train, y_train, 10, args.epochs[0], **MODEL)
    model = finetune_adavit(vit, x_train, y_train, args.gamma, args.epochs[1])
    fast = model.fast_path()
    result = fast.run(x_test, batch_size=min(500, len(x_test)))
    macs = result.macs
    full_accuracy = float((vit.predict(x_test, verbose=0).argmax(-1) == y_test).mean())
    accuracy = float((result.outputs.argmax(-1) == y_test).mean())
    print(f"train {args.train}, test {args.test}, γ={args.gamma}, model {MODEL}")
    print(
        f"accuracy: full ViT {full_accuracy:.4f}, AdaViT {accuracy:.4f} "
        f"({100 * (accuracy - full_accuracy):+.2f} points)"
    )
    print(
        f"MMACs per image: full {fast.full_macs() / 1e6:.3f}, AdaViT {macs.mean() / 1e6:.3f} "
        f"(ratio {fast.full_macs() / macs.mean():.2f})"
    )
    predictors = {
        "full (XLA)": xla_function(vit),
        "fast path": lambda batch: fast.run(batch).outputs,
    }
    print(f"{'batch':>5} {'full XLA ms':>12} {'fast path ms':>13} {'XLA/fast':>9}")
    for batch, rounds in zip((1, 64), args.rounds, strict=True):
        ms = batch_latency_ms(predictors, x_test, batch, rounds)
        print(
            f"{batch:>5} {ms['full (XLA)']:>12.2f} {ms['fast path']:>13.2f} "
            f"{ms['full (XLA)'] / ms['fast path']:>9.2f}"
        )


if __name__ == "__main__":
    main()
