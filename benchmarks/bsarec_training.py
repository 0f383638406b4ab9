"""Training throughput of BSARec and SASRec: the former ways, and the last block at one position.

Times one epoch of training plus its validation (full ranking of every item
for every validation query) on MovieLens-100K-sized data: 1,682 items,
left-padded histories of length 50, batch 256, 153 steps per epoch (the
39,157 training prefixes of MovieLens-100K), random item sequences split
leave-one-out. Each model (`build_sasrec`, `build_bsarec`, official
defaults) is trained, in the same process and after a first epoch that
compiles:

- `former`: the model whose blocks compute every position
  (`last_position_only=False`), trained by one `model.fit` over all epochs
  with Keras' shuffling and `RankingEarlyStopping` as a callback, one step
  per call, as the reproduction trained when the speed target was set;
- `fit_recommender`: the same model trained by
  `keras_attn.recommendation.fit_recommender`, one `fit` per epoch on
  samples shuffled by the run's own generator, its state saved after the
  epoch, `--steps-per-execution` steps per call;
- `last position`: `fit_recommender` training the model whose last block
  computes the scored position only (`last_position_only=True`, the
  default);

each with and without XLA (`jit_compile`; `--xla off` or `on` times one
choice, `--ways` a subset of the ways: `former` is always timed). Every model, way and XLA choice
is timed once per round, in `--rounds` interleaved rounds (each round times
them all, so that a slower spell of the machine hits every row), and each
row reports the median over the rounds. Prints sequences per second and,
per model, the best median of each way against the best median of the
former way. Then checks that the last-position model trains as the full
one without dropout (with dropout its last block draws masks for the scored
position only, so the losses differ step by step): the running loss of the
first `--trajectory-steps` steps (one step per call, the same seeds), per
model and XLA choice, as the largest absolute difference.

    python benchmarks/bsarec_training.py [--steps 153] [--rounds 5] [--out results/benchmarks]
        [--ways former fit-recommender last-position] [--xla both] [--profile]

`--profile` (TensorFlow, without XLA) first writes where an epoch's time goes,
per model, for the former model and the last-position one: the shares of
validation and of training, and the training's op time (TensorFlow's
profiler) split into the phases of `PHASES` (a gradient op counts with its
layer).

Writes `bsarec_training.json` (a `meta` block, the load at the start and the
rows) to `--out`.
"""

import argparse
import functools
import os
import pathlib
import tempfile
import time

os.environ.setdefault("KERAS_BACKEND", "tensorflow")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.models import build_bsarec, build_sasrec  # noqa: E402
from keras_attn.recommendation import (  # noqa: E402
    RankingEarlyStopping,
    fit_recommender,
    leave_one_out_split,
)
from keras_attn.recommendation.training import compile_recommender  # noqa: E402
from keras_attn.utils import finish_run  # noqa: E402
from keras_attn.utils.training import (  # noqa: E402
    build_optimizer,
    step_losses,
)

NUM_ITEMS = 1682
# The models' options of the loss comparison: the trainings are equal step by step.
DROPOUT_OFF = {"dropout": 0.0, "attention_dropout": 0.0}
# --ways on the command line -> the rows' names of the ways.
WAYS = {"former": "former", "fit-recommender": "fit_recommender", "last-position": "last position"}
XLA_CHOICES = {"both": (False, True), "off": (False,), "on": (True,)}
# Phases of a training step for `--profile`: the first phase with a pattern in the name of
# an op takes its time (`{last}` is the last block's index); the rest counts as "other".
PHASES = {
    "optimizer": ("/adam/",),
    "loss": ("compile_loss/",),
    "last block": ("/block_{last}_",),
    "earlier blocks": ("/block_",),
    "embedding and scores": ("/items", "/positions", "/embedding_"),
}


class EpochTimer(keras.callbacks.Callback):
    """The `time.perf_counter()` at the start and the end of each epoch."""

    def __init__(self):
        super().__init__()
        self.starts, self.ends = [], []

    def on_epoch_begin(self, epoch, logs=None):
        self.starts.append(time.perf_counter())

    def on_epoch_end(self, epoch, logs=None):
        self.ends.append(time.perf_counter())


def former_way(model, split, batch_size, jit_compile):
    """Seconds of the second epoch of the former training (with its validation).

    Timed to the epoch's end (the early-stopping callback's validation runs
    before the timer's): the end of `fit`, which waits for TensorFlow's
    pipeline, comes once per run in this way, not once per epoch.
    """
    model.compile(
        optimizer=keras.optimizers.Adam(1e-3),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        jit_compile=jit_compile,
    )
    build_optimizer(model)
    stopping = RankingEarlyStopping(split.valid_inputs, split.valid_targets, split.valid_seen)
    timer = EpochTimer()
    model.fit(
        split.train_inputs,
        split.train_targets,
        batch_size=batch_size,
        epochs=2,
        callbacks=[stopping, timer],
        verbose=0,
    )
    return timer.ends[1] - timer.starts[1]


def new_way(model, split, batch_size, jit_compile, steps):
    """Seconds of the second epoch of `fit_recommender` (with validation and state)."""
    timer = EpochTimer()
    with tempfile.TemporaryDirectory() as folder:
        fit_recommender(
            model,
            split,
            num_items=NUM_ITEMS,
            epochs=2,
            batch_size=batch_size,
            jit_compile=jit_compile,
            steps_per_execution=steps,
            state_path=pathlib.Path(folder) / "state.npz",
            callbacks=[timer],
        )
        return time.perf_counter() - timer.starts[1]


def random_split(steps, batch_size, max_sequence_length, rng):
    """A leave-one-out split of random histories with `steps * batch_size` training samples."""
    users = max(1, steps * batch_size // max_sequence_length)
    sequences = [rng.integers(1, NUM_ITEMS + 1, max_sequence_length + 2) for _ in range(users)]
    return leave_one_out_split(sequences, max_sequence_length)


def first_losses(model, split, batch_size, jit_compile, steps):
    """The running training loss after each of the first `steps` steps, one step per call."""
    compile_recommender(model, jit_compile=jit_compile)
    inputs = split.train_inputs[: steps * batch_size]
    targets = split.train_targets[: steps * batch_size]
    return step_losses(model, inputs, targets, batch_size)


def trajectory_gaps(builders, split, batch_size, steps, xla_choices):
    """Per model and XLA choice: the largest loss difference, last position against full.

    The models train without dropout, so the two trainings are equal step by step.
    """
    gaps = []
    for name, builder in builders.items():
        for jit_compile in xla_choices:
            losses = []
            for last_position_only in (False, True):
                keras.utils.set_random_seed(0)
                model = builder(last_position_only, **DROPOUT_OFF)
                losses.append(first_losses(model, split, batch_size, jit_compile, steps))
            gap = float(np.abs(losses[0] - losses[1]).max())
            gaps.append({"model": name, "jit_compile": jit_compile, "max_loss_difference": gap})
            print(f"{name} jit_compile={jit_compile}: first {steps} losses differ by {gap:.1e}")
    return gaps


def timed_rows(builders, ways, split, rounds, xla_choices):
    """Sequences/s of every model, way and XLA choice over `rounds` interleaved rounds.

    Each round times every model, way and XLA choice once; a row gives the median
    over the rounds and the speed of each round.
    """
    speeds = {
        (name, way, jit_compile): []
        for name in builders
        for way in ways
        for jit_compile in xla_choices
    }
    for round_index in range(rounds):
        for name, way, jit_compile in speeds:
            train, last_position_only = ways[way]
            keras.utils.set_random_seed(0)
            seconds = train(builders[name](last_position_only), jit_compile=jit_compile)
            speed = len(split.train_targets) / seconds
            speeds[name, way, jit_compile].append(speed)
            print(
                f"round {round_index + 1}/{rounds} {name} {way} jit_compile={jit_compile}: "
                f"{speed:.0f} sequences/s",
                flush=True,
            )
    return [
        {
            "model": name,
            "way": way,
            "jit_compile": jit_compile,
            "sequences_per_s": float(np.median(values)),
            "sequences_per_s_per_round": values,
        }
        for (name, way, jit_compile), values in speeds.items()
    ]


def best_over_former(rows, name, ways):
    """Per way: its faster XLA choice over the former way's faster one, for model `name`."""
    best = {
        way: max(r["sequences_per_s"] for r in rows if r["model"] == name and r["way"] == way)
        for way in ways
    }
    ratios = {way: best[way] / best["former"] for way in ways if way != "former"}
    for way, ratio in ratios.items():
        print(f"{name}: {way} / former (each at its faster XLA choice) {ratio:.2f}")
    return ratios


def phase_profile(model, split, batch_size):
    """Shares of one epoch's time (after one that compiles): validation, training phases.

    Trains `model` (without XLA) for an epoch under TensorFlow's profiler;
    each training phase gets the training time times its share of the op
    time of the phases (`PHASES`).
    """
    import tensorflow as tf
    from tensorflow.tsl.profiler.protobuf import xplane_pb2

    last_block = sum(layer.name.startswith("block_") for layer in model.layers) - 1
    compile_recommender(model, jit_compile=False)
    stopping = RankingEarlyStopping(split.valid_inputs, split.valid_targets, split.valid_seen)
    trained, validated = EpochTimer(), EpochTimer()  # epoch ends before and after validation
    data = (split.train_inputs, split.train_targets)
    options = {"batch_size": batch_size, "verbose": 0, "callbacks": [trained, stopping, validated]}
    model.fit(*data, **options)
    with tempfile.TemporaryDirectory() as folder:
        tf.profiler.experimental.start(folder)
        model.fit(*data, **options)
        tf.profiler.experimental.stop()
        space = xplane_pb2.XSpace()
        space.ParseFromString(next(pathlib.Path(folder).rglob("*.xplane.pb")).read_bytes())
    op_time = dict.fromkeys([*PHASES, "other"], 0)
    for plane in space.planes:
        for line in plane.lines:
            for event in line.events:
                name = plane.event_metadata[event.metadata_id].name
                op, _, op_type = name.partition(":")
                if op_type and " " not in name and ":" not in op_type:  # an op, "name:type"
                    op_time[_phase(op, last_block)] += event.duration_ps
    training = trained.ends[1] - trained.starts[1]
    epoch = validated.ends[1] - validated.starts[1]
    total = sum(op_time.values())
    shares = {phase: training / epoch * time / total for phase, time in op_time.items()}
    return {"validation": (epoch - training) / epoch, **shares}


def _phase(op_name, last_block):
    for phase, patterns in PHASES.items():
        if any(pattern.format(last=last_block) in op_name for pattern in patterns):
            return phase
    return "other"


def profile_rows(builders, split, batch_size):
    """`phase_profile` of every model, former and last position, printed."""
    rows = []
    for name, builder in builders.items():
        for way, last_position_only in (("former", False), ("last position", True)):
            keras.utils.set_random_seed(0)
            shares = phase_profile(builder(last_position_only), split, batch_size)
            rows.append({"model": name, "way": way, "shares": shares})
            print(f"{name} {way}: " + ", ".join(f"{p} {s:.0%}" for p, s in shares.items()))
    return rows


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--steps", type=int, default=153, help="Training steps per epoch (153: MovieLens-100K's)."
    )
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--max-sequence-length", type=int, default=50)
    parser.add_argument("--steps-per-execution", type=int, default=16)
    parser.add_argument(
        "--rounds", type=int, default=5, help="Interleaved rounds; rows give the median."
    )
    parser.add_argument(
        "--trajectory-steps", type=int, default=30, help="Steps of the loss comparison."
    )
    parser.add_argument(
        "--ways",
        nargs="+",
        choices=sorted(WAYS),
        default=list(WAYS),
        help="Ways timed (`former` always is: the ratios are taken against it).",
    )
    parser.add_argument(
        "--xla", choices=sorted(XLA_CHOICES), default="both", help="XLA choices timed."
    )
    parser.add_argument(
        "--profile", action="store_true", help="First profile an epoch per model (TensorFlow)."
    )
    parser.add_argument("--out", default="results/benchmarks", help="Folder for the JSON.")
    args = parser.parse_args(argv)
    if args.profile and keras.backend.backend() != "tensorflow":
        raise ValueError(
            "`--profile` reads TensorFlow's profiler. "
            f"Received: backend={keras.backend.backend()!r}"
        )
    xla_choices = XLA_CHOICES[args.xla]
    started_at = time.time()
    load_at_start = [round(value, 2) for value in os.getloadavg()]
    split = random_split(
        args.steps, args.batch_size, args.max_sequence_length, np.random.default_rng(0)
    )
    builders = {
        "SASRec": lambda last, **options: build_sasrec(
            NUM_ITEMS, args.max_sequence_length, seed=0, last_position_only=last, **options
        ),
        "BSARec": lambda last, **options: build_bsarec(
            NUM_ITEMS, args.max_sequence_length, seed=0, last_position_only=last, **options
        ),
    }
    recommender = functools.partial(
        new_way, split=split, batch_size=args.batch_size, steps=args.steps_per_execution
    )
    # way -> (train(model, jit_compile) -> seconds, whether the last block scores one position)
    all_ways = {
        "former": (functools.partial(former_way, split=split, batch_size=args.batch_size), False),
        "fit_recommender": (recommender, False),
        "last position": (recommender, True),
    }
    chosen = {"former", *(WAYS[way] for way in args.ways)}
    ways = {way: train for way, train in all_ways.items() if way in chosen}
    profile = profile_rows(builders, split, args.batch_size) if args.profile else None
    rows = timed_rows(builders, ways, split, args.rounds, xla_choices)
    speedups = {name: best_over_former(rows, name, ways) for name in builders}
    gaps = trajectory_gaps(builders, split, args.batch_size, args.trajectory_steps, xla_choices)
    config = {
        "steps": args.steps,
        "batch_size": args.batch_size,
        "max_sequence_length": args.max_sequence_length,
        "steps_per_execution": args.steps_per_execution,
        "rounds": args.rounds,
        "xla": args.xla,
        "profile": args.profile,
        "trajectory_steps": args.trajectory_steps,
        "trajectory_options": DROPOUT_OFF,
        "train_samples": len(split.train_targets),
        "valid_queries": len(split.valid_targets),
    }
    results = {
        "config": config,
        "load_average_at_start": load_at_start,
        "rows": rows,
        "speedup": speedups,
        "trajectory": gaps,
        **({"profile": profile} if profile else {}),
    }
    finish_run(
        args.out,
        "bsarec_training",
        {"results": results},
        started_at=started_at,
        setting="benchmark",
    )


if __name__ == "__main__":
    main()
