"""AdaViT from a converged backbone on Fashion-MNIST (Meng et al., CVPR 2022), resumable.

The long protocol of the paper at the size of `keras-attn reproduce adavit`
(the same data and ViT: patches of 4, width 32, 4 heads, MLPs of 64, 5
blocks at the full setting). A validation split (training images after the
training subset) decides every stop.

1. Backbone, once: the ViT trains (Adam, seed 0) until validation accuracy
   has not risen for `patience` epochs or `backbone_epochs` have run; the
   weights of its best epoch are saved as `backbone.keras` in the backbone
   folder (`--backbone`, by default `adavit-converged-backbone` in `--out`),
   beside `backbone.json` (its configuration and training record). Every
   seed and every γ loads it, and so do runs of other fine-tuning options
   (other `--state` folders). A saved backbone of another configuration
   raises a `ValueError` that names both.
2. Per seed and γ, the learned policy: `finetune_adavit`'s model and
   optimiser (official defaults, or the `--former-behaviour`, gate
   learning-rate and distillation options), trained epoch by epoch. After
   each epoch it records the training loss (cross-entropy plus usage loss),
   and on the validation split the inference decisions' usage, their usage
   loss and the accuracy. Stopping rule: an epoch is *at target* when the
   official token, head and block usage (`AdaViT.usage`: `"tokens"`,
   `"heads"`, the mean of `"attention"` and `"mlp"`) are each within
   `usage_tolerance` of γ. Training stops after `finetune_epochs`, or
   earlier once `patience` epochs at target have passed without a higher
   validation accuracy than the best epoch at target; the weights of that
   best epoch are kept (the last epoch's when no epoch reached the target).
3. Per seed and γ, the random policy: by default the learned model with
   random decisions at the usage that its learned decisions measure per
   kind, on the same test images (as `keras-attn reproduce adavit`); and,
   once every run has finished, random decisions with the learned keep rate
   in every block (`block_matched_random`), which compute about as much as
   the learned ones.
4. Per seed and γ, a dense ViT of about the MACs of an AdaViT of the
   backbone at usage γ (`equal_macs_sizes`: depth and width chosen by
   `keras_attn.models.count_macs`), trained from scratch with the budget of
   backbone plus fine-tuning (`backbone_epochs + finetune_epochs`, the same
   patience).

Every run saves its state (weights, optimizer, epoch, per-epoch records)
after every epoch in the state folder (`--state`, by default
`adavit-converged-state` in `--out`); the same command run again resumes
each unfinished run where it stopped and skips finished ones, with the same
result as an uninterrupted run.
"""

import json
import os
import pathlib
import time

import keras
import numpy as np

from keras_attn.datasets import load_fashion_mnist
from keras_attn.models import build_vision_transformer, count_macs
from keras_attn.models.adavit import FORMER_BEHAVIOUR, AdaViT, xla_function
from keras_attn.models.adavit.training import compile_for_evaluation, compiled_for_finetuning
from keras_attn.reproduce import adavit
from keras_attn.reproduce._images import paired_difference
from keras_attn.reproduce._run import (
    add_seeds_argument,
    check_protocol,
    choose_setting,
    finish,
    mean_and_std,
    read_result,
    run_in_workers,
)
from keras_attn.utils import batch_latency_ms
from keras_attn.utils.results import write_atomically
from keras_attn.utils.run_state import read_run_state, restore_run_state, save_run_state
from keras_attn.utils.training import ordered_batches, top1_accuracy
from keras_attn.utils.validation import float_option, int_option, output_folder

NAME = "adavit-converged"
HELP = "AdaViT from a converged ViT on Fashion-MNIST: learned vs random vs equal-MACs dense ViT."
MODEL = adavit.MODEL
SETTINGS = {
    # KERAS_ATTN_SMALL (tests): seconds per run.
    "small": {
        "train": 128,
        "validation": 64,
        "test": 64,
        "seeds": 2,
        "num_layers": 2,
        "backbone_epochs": 2,
        "finetune_epochs": 2,
        "patience": 1,
    },
    "fast": {
        "train": 3000,
        "validation": 1000,
        "test": 1024,
        "seeds": 1,
        "num_layers": 5,
        "backbone_epochs": 10,
        "finetune_epochs": 6,
        "patience": 3,
    },
    # The budget of record: the paper fine-tunes 150 epochs.
    "full": {
        "train": 16000,
        "validation": 4000,
        "test": 5000,
        "seeds": 3,
        "num_layers": 5,
        "backbone_epochs": 300,
        "finetune_epochs": 150,
        "patience": 15,
    },
}
STATE_FOLDER = "adavit-converged-state"
BACKBONE_FOLDER = "adavit-converged-backbone"
BACKBONE_SEED = 0
EVALUATION_BATCH = adavit.LATENCY_BATCH
# The version of the runs' state and records: runs of another version are never resumed.
STATE_VERSION = 1
RECORD_FIELDS = {"version": (), "epochs": (), "best_epoch": (), "best_accuracy": (), "wait": ()}
MEASURES = ("accuracy", "macs")
# The fast-path latency: batch sizes, and interleaved rounds per setting.
LATENCY_BATCHES = (1, 64)
LATENCY_ROUNDS = {"small": 2, "fast": 10, "full": 20}
# Each model's line in the figure: (key, matplotlib format, label).
STYLES = (
    ("learned", "o-", "AdaViT, learned policy"),
    ("random", "s--", "AdaViT, random"),
    ("dense", "^:", "dense ViT, equal MACs"),
    ("learned_tempered", "v-", "AdaViT, learned, tempered inference"),
    ("random_tempered", "x--", "AdaViT, random at tempered usage"),
    ("random_like", "d--", "AdaViT, random, learned rate per block"),
    ("random_like_tempered", "+--", "AdaViT, random, tempered rate per block"),
)
# Per γ; "_tempered": the same fine-tuned model deciding with `tempered_inference=True`.
MODELS = tuple(key for key, _, _ in STYLES)
# What a finished run of each variant holds besides its spec.
RESULT_KEYS = {
    "adavit": ("training", "learned", "random", "tempered"),
    "dense": ("training", "sizes", "target_macs", "dense"),
}
# The models of the figure's panel beside the paper (the random ones fall far below).
RELATIVE_MODELS = ("learned", "learned_tempered", "dense")
# The target: accuracy within this many points of the full backbone.
TARGET_POINTS = 1.5
# Paper points (ImageNet): (name, MACs of the AdaViT / of its backbone, top-1 change in points).
PAPER_POINTS = (("Ada-T2T-ViT-19", 3.9 / 8.5, 81.1 - 81.9), ("Ada-DeiT-S", 2.3 / 4.6, 77.3 - 79.9))


def add_arguments(parser):
    parser.add_argument(
        "--gammas",
        type=float_option(0.0, 1.0, low_open=True),
        nargs="+",
        default=[0.3, 0.5, 0.7],
        help="usage targets γ (default: 0.3 0.5 0.7)",
    )
    add_seeds_argument(parser)
    parser.add_argument(
        "--former-behaviour",
        choices=sorted(FORMER_BEHAVIOUR),
        nargs="+",
        default=[],
        help="AdaViT options set to keras_attn's former behaviour (default: none, all official).",
    )
    parser.add_argument(
        "--gate-learning-rate-scale",
        type=float_option(0.0, low_open=True),
        default=1.0,
        help="factor of the gates' learning rate (default: 1, the official default)",
    )
    parser.add_argument(
        "--distillation-weight",
        type=float_option(0.0),
        default=0.0,
        help="weight of the backbone's predictions as a teacher (default: 0, official)",
    )
    parser.add_argument(
        "--usage-tolerance",
        type=float_option(0.0, 1.0, low_open=True),
        default=0.05,
        help="largest distance of each usage from γ at which an epoch is at target (0.05)",
    )
    parser.add_argument("--batch-size", type=int_option(), default=128, help="batch size (128)")
    parser.add_argument(
        "--learning-rate",
        type=float_option(0.0, low_open=True),
        default=1e-3,
        help="Adam's learning rate, backbone, fine-tuning and dense ViT (1e-3)",
    )
    parser.add_argument(
        "--workers",
        type=int_option(),
        default=1,
        help="processes that train independent runs side by side (default: 1); "
        "the results do not change.",
    )
    parser.add_argument(
        "--state",
        type=output_folder,
        help=f"Folder of the saved runs, to resume from (default: {STATE_FOLDER} in --out).",
    )
    parser.add_argument(
        "--backbone",
        type=output_folder,
        help="Folder of the trained backbone, which runs of other fine-tuning options (other "
        f"--state folders) share (default: {BACKBONE_FOLDER} in --out).",
    )


def run(args):
    if keras.backend.backend() == "torch":
        raise ValueError(
            "The adavit-converged reproduction evaluates the XLA-compiled fast path, which "
            "runs on the TensorFlow and JAX backends only: set KERAS_BACKEND=tensorflow or "
            "jax. Received: backend='torch'"
        )
    started_at = time.time()
    size, setting = choose_setting(args, SETTINGS)
    config = protocol(args, setting)
    state = pathlib.Path(args.state or pathlib.Path(args.out) / STATE_FOLDER)
    check_protocol(state, config)
    folder = pathlib.Path(args.backbone or pathlib.Path(args.out) / BACKBONE_FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    backbone, backbone_record = trained_backbone(folder, backbone_config(config), load_data(config))
    full = {"accuracy": backbone_record["test_accuracy"], "macs": count_macs(backbone)}
    jobs = [
        (spec, config, str(state), str(folder))
        for seed in range(config["seeds"])
        for gamma in config["gammas"]
        for spec in ({"variant": "adavit", "seed": seed, "gamma": gamma}, dense_spec(seed, gamma))
    ]
    done = run_in_workers(train_variant, jobs, args.workers)
    test = load_data(config)["test"]
    like = block_matched_random(done, state, *test)
    latency = measured_latency(done, state, backbone, test[0], LATENCY_ROUNDS[size])
    full["latency_ms"] = latency["ms_per_batch"]["full"]
    runs = [
        {
            "seed": seed,
            "adavit": [
                _gamma_entry(done, seed, gamma, latency, like) for gamma in config["gammas"]
            ],
        }
        for seed in range(config["seeds"])
    ]
    results = {
        "setting": {**setting, "name": size, "seeds": config["seeds"]},
        "protocol": config,
        "adavit_options": adavit_options(config),
        "model": {**MODEL, "num_layers": config["num_layers"]},
        "gammas": config["gammas"],
        "backbone": backbone_record,
        "full": full,
        "latency": {key: latency[key] for key in ("load_at_start", "rounds", "batches")},
        "runs": runs,
        "summary": summarize(runs, full, backbone_record),
    }
    _print_summary(results["summary"])
    return finish(args, NAME, results, plot(results), started_at=started_at, setting=size)


def protocol(args, setting):
    """The settings every run shares, from `args` and `setting`."""
    return {
        **{key: value for key, value in setting.items() if key != "seeds"},
        "seeds": args.seeds or setting["seeds"],
        "gammas": list(args.gammas),
        "former_behaviour": sorted(args.former_behaviour),
        "gate_learning_rate_scale": args.gate_learning_rate_scale,
        "distillation_weight": args.distillation_weight,
        "usage_tolerance": args.usage_tolerance,
        "batch_size": args.batch_size,
        "learning_rate": args.learning_rate,
        "state_version": STATE_VERSION,
    }


def backbone_config(config):
    """What the backbone depends on: its data, sizes, training and stopping."""
    keys = ("train", "validation", "test", "num_layers", "backbone_epochs", "patience")
    return {
        **{key: config[key] for key in keys},
        **MODEL,
        "batch_size": config["batch_size"],
        "learning_rate": config["learning_rate"],
        "seed": BACKBONE_SEED,
        "state_version": STATE_VERSION,
    }


def adavit_options(config):
    """The `AdaViT` arguments that differ from the official defaults."""
    return {option: FORMER_BEHAVIOUR[option] for option in config["former_behaviour"]}


def load_data(config):
    """Fashion-MNIST in `[0, 1]`: `{"train", "validation", "test"}`, each `(images, labels)`.

    The validation images are the training images after the training subset.
    """
    train, validation = config["train"], config["validation"]
    (x_train, y_train), (x_test, y_test) = load_fashion_mnist(
        limit=max(train + validation, config["test"])
    )

    def scaled(x, y):
        return x.astype("float32") / 255.0, y.astype("int32")

    return {
        "train": scaled(x_train[:train], y_train[:train]),
        "validation": scaled(x_train[train : train + validation], y_train[train:][:validation]),
        "test": scaled(x_test[: config["test"]], y_test[: config["test"]]),
    }


def trained_backbone(state, config, data):
    """The backbone of `config`: trained to its plateau once, then loaded from `state`.

    Its training saves its state after every epoch in `state` too, and
    resumes from it.

    Args:
        state: `pathlib.Path`, the backbone folder.
        config: dict from `backbone_config`.
        data: dict from `load_data`.

    Returns:
        `(model, record)`: the ViT compiled for evaluation, and its training
        record (per-epoch training loss and validation accuracy, best epoch,
        test accuracy).

    Raises:
        ValueError: `state` holds a backbone of another configuration.
    """
    path, record_path = state / "backbone.keras", state / "backbone.json"
    if record_path.is_file():
        saved = json.loads(record_path.read_bytes())
        if saved["config"] != config:
            raise ValueError(
                f"The folder {state} holds a backbone of another configuration; pass another "
                "--backbone folder or the same options. Received: config="
                f"{config!r}, the saved backbone's config={saved['config']!r}"
            )
        if path.is_file():
            return compile_for_evaluation(keras.models.load_model(path)), saved["record"]
    keras.utils.set_random_seed(config["seed"])
    sizes = {key: config[key] for key in (*MODEL, "num_layers")}
    vit = _compiled_vit(data, sizes, config["learning_rate"])
    record = train_epochs(
        vit,
        data,
        state / "backbone.npz",
        seed=config["seed"],
        batch_size=config["batch_size"],
        max_epochs=config["backbone_epochs"],
        patience=config["patience"],
    )
    record["test_accuracy"] = accuracy(vit, *data["test"])
    write_atomically(path, lambda file: _save_keras(vit, file))
    text = json.dumps({"config": config, "record": record}, indent=1)
    write_atomically(record_path, lambda file: file.write(text.encode()))
    (state / "backbone.npz").unlink(missing_ok=True)
    return compile_for_evaluation(vit), record


def _save_keras(model, file):
    """Writes `model` as a `.keras` archive into the open binary `file`."""
    staging = pathlib.Path(file.name + ".keras")
    try:
        model.save(staging)
        file.write(staging.read_bytes())
    finally:
        staging.unlink(missing_ok=True)


def train_epochs(
    model,
    data,
    state_path,
    *,
    seed,
    batch_size,
    max_epochs,
    patience,
    targets=None,
    evaluate=None,
    at_target=None,
):
    """Trains a compiled model epoch by epoch, saving its state, to a budget or a plateau.

    Epoch `e` trains once on the training images in an order drawn with the
    seed `(seed, e)`, then records `"train_loss"` and the validation
    `"accuracy"` (and what `evaluate` adds). Epochs for which `at_target`
    holds (every epoch without it) count for the plateau: training stops
    after `max_epochs` epochs, or when `patience` such epochs have passed
    without a higher validation accuracy than the best of them, whose
    weights the model ends with (its last weights when no epoch counted).
    After every epoch the state is saved at `state_path`
    (`keras_attn.utils.run_state`); a later call with the same path
    resumes there, with the same result as an uninterrupted run.

    Args:
        model: a compiled model whose optimizer is built or buildable.
        data: dict from `load_data`.
        state_path: `pathlib.Path` of the state file.
        seed: int, seed of the epochs' order.
        batch_size: int.
        max_epochs: int, the budget.
        patience: int, counted epochs without improvement before stopping.
        targets: training targets instead of the training labels.
        evaluate: optional callable, `evaluate(model, x, y)` → dict of
            JSON-serializable values added to each epoch's record.
        at_target: optional callable, `at_target(epoch_record)` → bool.

    Returns:
        dict: `"epochs"` (one record per epoch), `"best_epoch"` (1-based,
        or `None`), `"best_accuracy"`, `"wait"`, `"epochs_run"` and
        `"seconds"` (this call's training and validation time).
    """
    x, y = data["train"]
    targets = y if targets is None else targets
    started = time.perf_counter()
    if not model.optimizer.built:
        model.optimizer.build(model.trainable_variables)
    record = {"version": STATE_VERSION, "epochs": [], "best_epoch": None, "best_accuracy": None}
    record["wait"], best = 0, []
    if state_path.is_file():
        saved = read_run_state(state_path, RECORD_FIELDS)
        if saved is not None:  # else the damaged file was set aside
            record, arrays = saved
            _check_state_version(state_path, record)
            restore_run_state(state_path, model, arrays)
            best = arrays["best"]
    while len(record["epochs"]) < max_epochs and record["wait"] < patience:
        epoch = len(record["epochs"])
        order = np.random.default_rng([seed, epoch]).permutation(len(x))
        history = model.fit(
            **ordered_batches(x[order], targets[order], batch_size),
            epochs=epoch + 1,
            initial_epoch=epoch,
            verbose=0,
        )
        entry = {"epoch": epoch + 1, "train_loss": float(history.history["loss"][-1])}
        entry["accuracy"] = accuracy(model, *data["validation"])
        entry.update(evaluate(model, *data["validation"]) if evaluate else {})
        record["epochs"].append(entry)
        if at_target is None or at_target(entry):
            if record["best_epoch"] is None or entry["accuracy"] > record["best_accuracy"]:
                record.update(best_epoch=epoch + 1, best_accuracy=entry["accuracy"], wait=0)
                best = [keras.ops.convert_to_numpy(w) for w in model.weights]
            else:
                record["wait"] += 1
        save_run_state(state_path, model, record, best)
    if best:
        model.set_weights(best)
    del record["version"]
    return {**record, "epochs_run": len(record["epochs"]), "seconds": _since(started)}


def _check_state_version(path, record):
    if record["version"] != STATE_VERSION:
        raise ValueError(
            f"The state file {path} was written by another version of keras_attn; remove it "
            f"to train from the first epoch. Received: version={record['version']!r}"
        )


def _since(started):
    return time.perf_counter() - started


def accuracy(model, x, y):
    """Top-1 accuracy of `model`'s predictions on `(x, y)`."""
    return top1_accuracy(model.predict(x, batch_size=256, verbose=0), y)


def dense_spec(seed, gamma):
    return {"variant": "dense", "seed": seed, "gamma": gamma}


def run_name(spec):
    """The file stem of run `spec` in the state folder."""
    return f"{spec['variant']}-seed{spec['seed']}-gamma{spec['gamma']}"


def train_variant(spec, config, state, backbone_folder):
    """Trains and tests one run (`"adavit"` or `"dense"`), resuming it; a finished run is read."""
    state = pathlib.Path(state)
    done = state / f"{run_name(spec)}.json"
    finished = read_result(
        done, spec, lambda result: [k for k in RESULT_KEYS[spec["variant"]] if k not in result]
    )
    if finished is not None:
        return finished
    data = load_data(config)
    backbone, _ = trained_backbone(pathlib.Path(backbone_folder), backbone_config(config), data)
    train = train_adavit if spec["variant"] == "adavit" else train_dense
    result = {**spec, **train(spec, config, state, backbone, data)}
    text = json.dumps(result, indent=1)
    write_atomically(done, lambda file: file.write(text.encode()))
    (state / f"{run_name(spec)}.npz").unlink(missing_ok=True)
    print(f"{run_name(spec)}: {result['training']['epochs_run']} epochs", flush=True)
    return result


def train_adavit(spec, config, state, backbone, data):
    """Fine-tunes the AdaViT of `spec` and tests its learned and random policies."""
    gamma, seed = spec["gamma"], spec["seed"]
    model, targets = compiled_for_finetuning(
        backbone,
        *data["train"],
        gamma,
        seed=seed,
        batch_size=config["batch_size"],
        learning_rate=config["learning_rate"],
        gate_learning_rate_scale=config["gate_learning_rate_scale"],
        distillation_weight=config["distillation_weight"],
        **adavit_options(config),
    )
    tempered = model.with_inference_rule(tempered=True)
    training = train_epochs(
        model,
        data,
        state / f"{run_name(spec)}.npz",
        seed=seed,
        batch_size=config["batch_size"],
        max_epochs=config["finetune_epochs"],
        patience=config["patience"],
        targets=targets,
        evaluate=lambda model, x, y: usage_record(model, x, tempered),
        at_target=lambda entry: model.usage_at_target(entry["usage"], config["usage_tolerance"]),
    )
    compile_for_evaluation(model)
    model.save(state / f"{run_name(spec)}.keras")
    tempered.set_weights(model.get_weights())
    return {
        "training": training,
        **adavit.policy_results(model, *data["test"], seed),
        "tempered": adavit.policy_results(tempered, *data["test"], seed),
    }


def usage_record(model, x, tempered):
    """The usage and usage loss of `model`'s inference decisions on `x`.

    Also the usage of the tempered inference decisions (`AdaViT.with_inference_rule`),
    whose weights are set to `model`'s first, as `"usage_tempered"`.
    """
    decisions = model.decide(x)
    tempered.set_weights(model.get_weights())
    return {
        "usage": model.usage(decisions),
        "usage_loss": model.usage_loss(decisions),
        "usage_tempered": tempered.usage(tempered.decide(x)),
    }


def _compiled_vit(data, sizes, learning_rate):
    """A ViT of `sizes` for the images of `data`, compiled for training under XLA."""
    vit = build_vision_transformer(data["train"][0].shape[1:], 10, **sizes)
    vit.compile(
        keras.optimizers.Adam(learning_rate), "sparse_categorical_crossentropy", jit_compile=True
    )
    return vit


def train_dense(spec, config, state, backbone, data):
    """Trains the dense ViT of about the MACs of an AdaViT at `spec`'s γ, and tests it."""
    target = adavit_macs(backbone, spec["gamma"])
    sizes = equal_macs_sizes(target, data["train"][0].shape[1:], config["num_layers"])
    keras.utils.set_random_seed(spec["seed"])
    vit = _compiled_vit(data, sizes, config["learning_rate"])
    training = train_epochs(
        vit,
        data,
        state / f"{run_name(spec)}.npz",
        seed=spec["seed"],
        batch_size=config["batch_size"],
        max_epochs=config["backbone_epochs"] + config["finetune_epochs"],
        patience=config["patience"],
    )
    vit.save(state / f"{run_name(spec)}.keras")  # for the latency stage
    return {
        "training": training,
        "sizes": sizes,
        "target_macs": target,
        "dense": {"accuracy": accuracy(vit, *data["test"]), "macs": count_macs(vit)},
    }


def adavit_macs(backbone, gamma, examples=256):
    """Mean MACs per image of an AdaViT of `backbone` whose usages are all γ.

    Counted by `AdaViTFastPath.macs` on random decisions that keep a share
    γ of all tokens (the class token included, as the usage loss counts
    them), of the heads and of the attention and MLP sub-layers.
    """
    model = AdaViT(backbone, target_usage=gamma)
    model.build(backbone.input.shape)
    patches = model.stem.output.shape[1] - 1
    rates = {"patches": max(0.0, (gamma * (patches + 1) - 1) / patches)}
    rates.update(heads=gamma, attention=gamma, mlp=gamma)
    decisions = model.random_decisions(examples, rates, seed=0)
    return float(model.fast_path().macs(decisions).mean())


def equal_macs_sizes(target_macs, image_shape, num_layers, tolerance=0.1):
    """The depth and width of a dense ViT of about `target_macs` (`MODEL`'s other sizes).

    Tries every depth up to `num_layers` and every width that is a
    multiple of the heads up to `MODEL`'s (MLPs twice as wide, as there),
    counting with `keras_attn.models.count_macs`, and keeps the one closest
    to `target_macs`; on ties, the deeper.

    Returns:
        dict of `build_vision_transformer` sizes.

    Raises:
        ValueError: no candidate is within `tolerance` (relative) of the target.
    """
    heads = MODEL["num_heads"]
    candidates = [
        {**MODEL, "hidden_dim": width, "intermediate_dim": 2 * width, "num_layers": depth}
        for depth in range(num_layers, 0, -1)
        for width in range(heads, MODEL["hidden_dim"] + 1, heads)
    ]
    macs = [count_macs(build_vision_transformer(image_shape, 10, **c)) for c in candidates]
    errors = [abs(m - target_macs) / target_macs for m in macs]
    best = int(np.argmin(errors))  # the first of equals: the deeper
    if errors[best] > tolerance:
        raise ValueError(
            f"No dense ViT up to {num_layers} blocks of width {MODEL['hidden_dim']} has MACs "
            f"within {tolerance:.0%} of the target. Received: target_macs={target_macs}, "
            f"closest {macs[best]}"
        )
    return candidates[best]


def block_matched_random(done, state, x, y):
    """Each learned policy against random decisions of its rate in every block, saved.

    Once every run has finished, per AdaViT run and inference rule (official
    and tempered): the fast path's learned decisions on the test images,
    then random decisions with their keep rate in every block, per kind
    (`AdaViT.random_decisions_like`, seeded with the run's seed), which
    compute about the MACs of the learned ones where the random policy of
    equal mean usage may compute far less. Saved as `random-like.json` in
    `state`; a later call reads it.

    Returns:
        dict: `run_name -> {"random_like": entry, "random_like_tempered":
        entry}`, each entry the accuracy, mean MACs and usage.
    """
    path = state / "random-like.json"
    if path.is_file():
        return json.loads(path.read_bytes())
    record = {}
    for result in done:
        if result["variant"] != "adavit":
            continue
        name = run_name(result)
        model = keras.models.load_model(state / f"{name}.keras")
        rules = (("random_like", model), ("random_like_tempered", None))
        record[name] = {}
        for key, rule_model in rules:
            rule_model = rule_model or model.with_inference_rule(tempered=True)
            fast = rule_model.fast_path()
            learned = fast.run(x, batch_size=EVALUATION_BATCH).decisions
            like = rule_model.random_decisions_like(learned, seed=result["seed"])
            outcome = fast.run(x, like, batch_size=EVALUATION_BATCH)
            record[name][key] = adavit.policy_entry(rule_model, outcome, y)
    text = json.dumps(record, indent=1)
    write_atomically(path, lambda file: file.write(text.encode()))
    return record


def measured_latency(done, state, backbone, images, rounds):
    """Median fast-path milliseconds per batch of every model, measured once, saved.

    Once every run has finished, this process alone times the XLA-compiled
    inference of the full backbone and, per run, the dense ViT and the
    AdaViT's learned and random policies, with the official and with the
    tempered inference decisions, in interleaved rounds (`batch_latency_ms`)
    at each batch size of `LATENCY_BATCHES`. The random decisions keep, per
    kind, the share that the policy's learned decisions keep on the test
    images; the block-matched ones (`block_matched_random`) the share that
    they keep in each block on the timed batch. Saved as `latency.json` in
    `state` with the load average at the start; a later call reads it.

    Returns:
        dict: `"ms_per_batch"`, `name -> {batch size as str: ms}` with names
        `"full"`, and `run_name` with `" learned"`, `" random"`,
        `" learned_tempered"`, `" random_tempered"`, `" random_like"`,
        `" random_like_tempered"` or `" dense"`;
        `"load_at_start"`, `"rounds"` and `"batches"`.
    """
    path = state / "latency.json"
    if path.is_file():
        return json.loads(path.read_bytes())
    models = {"full": backbone}
    for result in done:
        models[run_name(result)] = keras.models.load_model(state / f"{run_name(result)}.keras")
    load = os.getloadavg()[0]
    per_batch = {
        batch: batch_latency_ms(_predictors(done, models, images[:batch]), images, batch, rounds)
        for batch in LATENCY_BATCHES
    }
    names = per_batch[LATENCY_BATCHES[0]]
    record = {
        "ms_per_batch": {name: {str(b): per_batch[b][name] for b in per_batch} for name in names},
        "load_at_start": load,
        "rounds": rounds,
        "batches": list(LATENCY_BATCHES),
    }
    text = json.dumps(record, indent=1)
    write_atomically(path, lambda file: file.write(text.encode()))
    return record


def _predictors(done, models, batch_images):
    """`name -> callable` of one batch like `batch_images`, for `measured_latency`."""
    batch = len(batch_images)
    predictors = {"full": xla_function(models["full"])}
    for result in done:
        name = run_name(result)
        if result["variant"] == "dense":
            predictors[f"{name} dense"] = xla_function(models[name])
            continue
        policies = (("", models[name], result), ("_tempered", None, result["tempered"]))
        for suffix, model, policy in policies:
            model = model or models[name].with_inference_rule(tempered=True)
            fast = model.fast_path()
            usage = policy["learned"]["usage"]
            random = model.random_decisions(batch, usage, seed=result["seed"])
            like = model.random_decisions_like(model.decide(batch_images), seed=result["seed"])
            predictors[f"{name} learned{suffix}"] = fast.predictor()
            predictors[f"{name} random{suffix}"] = fast.predictor(random)
            predictors[f"{name} random_like{suffix}"] = fast.predictor(like)
    return predictors


def _gamma_entry(done, seed, gamma, latency, like):
    """One seed's results at γ: the learned and random policies and the dense ViT."""

    def find(variant):
        (found,) = [
            r for r in done if (r["variant"], r["seed"], r["gamma"]) == (variant, seed, gamma)
        ]
        return found

    learned, dense = find("adavit"), find("dense")
    ms = latency["ms_per_batch"]

    def timed(entry, name):
        return {**entry, "latency_ms": ms[name]}

    name, dense_name = run_name(learned), run_name(dense)
    return {
        "gamma": gamma,
        "learned": timed(learned["learned"], f"{name} learned"),
        "random": timed(learned["random"], f"{name} random"),
        "learned_tempered": timed(learned["tempered"]["learned"], f"{name} learned_tempered"),
        "random_tempered": timed(learned["tempered"]["random"], f"{name} random_tempered"),
        "random_like": timed(like[name]["random_like"], f"{name} random_like"),
        "random_like_tempered": timed(
            like[name]["random_like_tempered"], f"{name} random_like_tempered"
        ),
        "dense": {
            **timed(dense["dense"], f"{dense_name} dense"),
            "sizes": dense["sizes"],
            "target_macs": dense["target_macs"],
        },
        "training": {"adavit": learned["training"], "dense": dense["training"]},
    }


def summarize(runs, full, backbone_record):
    """Mean ± std over seeds per γ and model, and the paired differences that the claims need."""
    summary = {
        "pretrained_accuracy": mean_and_std([backbone_record["test_accuracy"]]),
        "full": _model_summary([full]),
        "adavit": [],
    }
    for index, entry in enumerate(runs[0]["adavit"]):
        per_seed = [run["adavit"][index] for run in runs]
        models = {model: _model_summary([e[model] for e in per_seed]) for model in MODELS}
        accuracies = {model: [e[model]["accuracy"] for e in per_seed] for model in MODELS}
        summary["adavit"].append(
            {
                "gamma": entry["gamma"],
                **models,
                **_claims(accuracies, full["accuracy"]),
                "epochs_run": [e["training"]["adavit"]["epochs_run"] for e in per_seed],
                "best_epoch": [e["training"]["adavit"]["best_epoch"] for e in per_seed],
            }
        )
    return summary


def _claims(accuracies, full_accuracy):
    """Paired differences of each learned policy (official and tempered) against the others.

    Keys `"learned_minus_random"`, `"learned_minus_random_like"`,
    `"learned_minus_dense"`, `"learned_minus_full"`, and the same with
    `"learned_tempered"` against the tempered random policies, the dense ViT
    and the full backbone.
    """
    differences = {}
    for learned, random in (("learned", "random"), ("learned_tempered", "random_tempered")):
        others = {
            "random": accuracies[random],
            "random_like": accuracies[random.replace("random", "random_like")],
            "dense": accuracies["dense"],
            "full": [full_accuracy] * len(accuracies["dense"]),
        }
        for name, other in others.items():
            differences[f"{learned}_minus_{name}"] = paired_difference(accuracies[learned], other)
    return differences


def _model_summary(entries):
    summary = {m: mean_and_std([entry[m] for entry in entries]) for m in MEASURES}
    summary["latency_ms"] = {
        batch: mean_and_std([entry["latency_ms"][batch] for entry in entries])
        for batch in entries[0]["latency_ms"]
    }
    if "usage" in entries[0]:
        usages = [entry["usage"] for entry in entries]
        summary["usage"] = {key: float(np.mean([u[key] for u in usages])) for key in usages[0]}
    return summary


def plot(results):
    """Accuracy against MACs, relative to the paper's, and against latency at batch 1 and 64."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    summary = results["summary"]
    figure, axes = plt.subplots(2, 2, figsize=(12, 9))
    (absolute, relative), timed = axes
    full = summary["full"]
    full_macs, full_accuracy = full["macs"]["mean"], full["accuracy"]["mean"]
    _plot_models(absolute, summary, lambda point: point["macs"]["mean"] / 1e6)
    absolute.set(xlabel="MMACs per image")
    for axis, batch in zip(timed, LATENCY_BATCHES, strict=True):
        _plot_models(axis, summary, lambda point, b=str(batch): point["latency_ms"][b]["mean"])
        axis.set(xlabel=f"fast-path ms per batch of {batch}")
    for index, (key, style, label) in enumerate(STYLES):
        if key not in RELATIVE_MODELS:
            continue
        points = [entry[key] for entry in summary["adavit"]]
        macs = np.array([p["macs"]["mean"] for p in points])
        accuracies = np.array([p["accuracy"]["mean"] for p in points])
        errors = 100 * np.array([p["accuracy"]["std"] for p in points])
        relative.errorbar(
            macs / full_macs,
            100 * (accuracies - full_accuracy),
            yerr=errors,
            fmt=style,
            color=f"C{index}",
            label=f"ours: {label}",
        )
    for name, ratio, change in PAPER_POINTS:
        relative.plot(ratio, change, "rD")
        relative.annotate(
            f"paper: {name}", (ratio, change), (-6, 4), textcoords="offset points", ha="right"
        )
    relative.axhline(0, color="k", linewidth=0.5)
    relative.axhline(-TARGET_POINTS, color="k", linewidth=0.5, linestyle="--")
    relative.set(
        xlabel="MACs / full model's",
        ylabel="accuracy − full model's (points)",
        ylim=_relative_limits(summary, full_accuracy),
        title="beside the paper (random policies: far below, see the table)",
    )
    relative.legend(fontsize=8, loc="lower left")
    seeds = results["setting"]["seeds"]
    figure.suptitle(f"AdaViT from a converged ViT on Fashion-MNIST, mean ± std over {seeds} seeds")
    figure.tight_layout()
    return figure


def _relative_limits(summary, full_accuracy):
    """The change axis' range: the learned policies, the dense ViTs and the paper's points."""
    changes = [change for _, _, change in PAPER_POINTS]
    for entry in summary["adavit"]:
        for key in RELATIVE_MODELS:
            accuracy = entry[key]["accuracy"]
            changes.append(100 * (accuracy["mean"] - accuracy["std"] - full_accuracy))
            changes.append(100 * (accuracy["mean"] + accuracy["std"] - full_accuracy))
    return min(changes + [-TARGET_POINTS]) - 1.0, max(changes + [0.0]) + 1.0


def _plot_models(axis, summary, x_of):
    """Test accuracy against `x_of(point)` for every model of `STYLES` and the full ViT."""
    for index, (key, style, label) in enumerate(STYLES):
        points = [entry[key] for entry in summary["adavit"]]
        accuracies = [p["accuracy"]["mean"] for p in points]
        errors = [p["accuracy"]["std"] for p in points]
        x = [x_of(p) for p in points]
        axis.errorbar(x, accuracies, yerr=errors, fmt=style, color=f"C{index}", label=label)
    for entry in summary["adavit"]:
        point = entry["learned"]
        axis.annotate(f"γ={entry['gamma']}", (x_of(point), point["accuracy"]["mean"]), fontsize=8)
    full = summary["full"]
    axis.plot(x_of(full), full["accuracy"]["mean"], "k*", markersize=12, label="full ViT")
    axis.set(ylabel="test accuracy")
    axis.legend(fontsize=8)


def _print_summary(summary):
    full = summary["full"]
    macs = full["macs"]["mean"] / 1e6
    print(f"full ViT: accuracy {full['accuracy']['mean']:.4f}, {macs:.2f} MMACs")
    for entry in summary["adavit"]:
        for model in MODELS:
            point = entry[model]
            print(
                f"γ={entry['gamma']} {model}: accuracy {point['accuracy']['mean']:.4f} ± "
                f"{point['accuracy']['std']:.4f}, {point['macs']['mean'] / 1e6:.2f} MMACs, "
                f"{point['latency_ms']['64']['mean']:.2f} ms per batch of 64"
            )
