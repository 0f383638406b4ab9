"""Reproduction of Michel et al. (2019), "Are sixteen heads really better than
one?" (https://arxiv.org/abs/1905.10650), on the pretrained all-MiniLM-L6-v2.

Task: which of the seven traditional sections of the King James Bible a verse
comes from (`load_kjv_sections`), with a linear classifier trained on the
frozen MiniLM sentence embeddings (250 training verses per section in the
full setting, so that the unpruned model is far above the 1/7 chance).
Heads are scored by `head_importance` on training verses, then 0-90% of the
72 heads are pruned in 10% steps, keeping one head per layer, in several
orders: least important first, most important first, three random orders
and (full setting) re-estimated importance. Quality is the test accuracy and
cross-entropy of the unchanged classifier, with 95% bootstrap intervals over
the test verses, also for the paired difference between the importance order
and the mean of the random orders.
Also: accuracy with each single head removed, and the throughput of the
really pruned models at batch 1 and 64, measured in interleaved rounds.
"""

import dataclasses
import os
import time

import keras
import numpy as np

from keras_attn.analysis import fit_linear_probe
from keras_attn.datasets import KJV_SECTIONS, load_kjv_sections
from keras_attn.pretrained import build_minilm_encoder, load_minilm_weights
from keras_attn.pruning import (
    head_importance,
    head_mask_array,
    iterative_pruning,
    measure_throughput,
    pruned_models,
    pruning_curve,
    single_head_ablations,
)
from keras_attn.reproduce._run import choose_setting, finish
from keras_attn.text import WordPieceTokenizer
from keras_attn.utils import bootstrap_interval
from keras_attn.utils.training import inference_function
from keras_attn.utils.validation import int_option

NAME = "heads"
HELP = "Head importance and pruning of MiniLM on Bible-section classification (Michel et al.)."

MAX_TOKENS = 64
BATCH_SIZE = 64
FRACTIONS = tuple(step / 10 for step in range(10))
RESAMPLES = 2000


@dataclasses.dataclass(frozen=True)
class Setting:
    train_per_class: int
    test_per_class: int
    importance_per_class: int
    fractions: tuple
    random_orders: int
    ablation_layers: tuple
    reestimate: bool
    throughput_fractions: tuple
    throughput_rounds: int


SETTINGS = {
    "small": Setting(3, 2, 2, (0.0, 0.5, 0.9), 3, (5,), False, (0.0, 0.5), 2),
    "fast": Setting(40, 20, 20, FRACTIONS, 3, (5,), False, (0.0, 0.5, 0.9), 10),
    "full": Setting(250, 100, 50, FRACTIONS, 3, tuple(range(6)), True, FRACTIONS, 10),
}


def add_arguments(parser):
    parser.add_argument(
        "--seed", type=int_option(0), default=0, help="Seed of the data and orderings."
    )


def run(args):
    started_at = time.time()
    size, setting = choose_setting(args, SETTINGS)
    keras.utils.set_random_seed(args.seed)
    start = time.perf_counter()
    task = PruningTask.create(setting, args.seed)
    importance = head_importance(task.classifier, task.importance_batches, task.loss)
    print(f"probe trained and heads scored in {time.perf_counter() - start:.0f} s")
    orders = {"importance": importance, "reverse": _negated(importance)}
    for order in range(setting.random_orders):
        orders[f"random_{order}"] = _random_scores(importance, args.seed + order)
    outcomes = {
        name: pruning_curve(task.evaluate, scores, setting.fractions)
        for name, scores in orders.items()
    }
    if setting.reestimate:
        outcomes["importance_reestimated"], _ = iterative_pruning(
            task.classifier,
            importance,
            setting.fractions,
            rescore=lambda pruned: head_importance(pruned, task.importance_batches, task.loss),
            evaluate=task.evaluate,
        )
    print(f"pruning curves done at {time.perf_counter() - start:.0f} s")
    ablations = single_head_ablations(
        task.classifier, lambda removed: _means(task.evaluate(removed)), setting.ablation_layers
    )
    print(f"single-head ablations done at {time.perf_counter() - start:.0f} s")
    throughput = task.throughput(importance, setting)
    print(f"throughput measured at {time.perf_counter() - start:.0f} s")
    curves = _curves(outcomes, args.seed)
    results = {
        "setting": dataclasses.asdict(setting),
        "task": "KJV verse -> one of 7 Bible sections, linear probe on frozen MiniLM",
        "sections": [section[0] for section in KJV_SECTIONS],
        "chance_accuracy": 1 / len(KJV_SECTIONS),
        "num_train": len(task.train_labels),
        "num_test": len(task.test_labels),
        "num_importance": int(sum(len(y) for _, y in task.importance_batches)),
        "fractions": list(setting.fractions),
        **curves,
        "importance": {name: score.tolist() for name, score in importance.items()},
        "single_head_ablation_accuracy": {
            name: [q[0] for q in values] for name, values in ablations.items()
        },
        "single_head_ablation_loss": {
            name: [q[1] for q in values] for name, values in ablations.items()
        },
        "unpruned_accuracy": curves["accuracy"]["importance"][0],
        "unpruned_accuracy_interval": curves["accuracy_interval"]["importance"][0],
        "unpruned_loss": curves["loss"]["importance"][0],
        "throughput": throughput,
        "seconds": time.perf_counter() - start,
    }
    _print_summary(results)
    figure = _figure(results)
    return finish(args, NAME, results, figure, started_at=started_at, setting=size)


def _curves(outcomes, seed):
    """Accuracy, loss and 95% bootstrap intervals of every order at every fraction.

    `random_mean` is the per-verse mean over the random orders;
    `importance_minus_random` the paired per-verse difference between the
    importance order and `random_mean`.
    """
    correct = {name: [o["correct"] for o in curve] for name, curve in outcomes.items()}
    losses = {name: [o["loss"] for o in curve] for name, curve in outcomes.items()}
    random = [name for name in outcomes if name.startswith("random_")]
    correct["random_mean"] = list(np.mean([correct[name] for name in random], axis=0))
    losses["random_mean"] = list(np.mean([losses[name] for name in random], axis=0))
    difference = [
        ours - theirs
        for ours, theirs in zip(correct["importance"], correct["random_mean"], strict=True)
    ]

    def intervals(per_fraction):
        return [list(bootstrap_interval(values, RESAMPLES, seed=seed)) for values in per_fraction]

    return {
        "accuracy": {name: [float(c.mean()) for c in curve] for name, curve in correct.items()},
        "accuracy_interval": {name: intervals(curve) for name, curve in correct.items()},
        "loss": {name: [float(v.mean()) for v in curve] for name, curve in losses.items()},
        "importance_minus_random": {
            "accuracy": [float(d.mean()) for d in difference],
            "interval": intervals(difference),
        },
    }


def _means(outcome):
    return float(outcome["correct"].mean()), float(outcome["loss"].mean())


class PruningTask:
    """The classifier, the tokenized data and the quality measure."""

    def __init__(self, classifier, tokenizer, train, test, importance_per_class):
        self.classifier = classifier
        self.tokenizer = tokenizer
        self.train_texts, self.train_labels = train
        self.test_texts, self.test_labels = test
        self.num_layers = 6
        self.num_heads = 12
        self.loss = keras.losses.SparseCategoricalCrossentropy()
        self.train_batches = self._batches(self.train_texts, self.train_labels)
        chosen = np.concatenate(
            [
                np.flatnonzero(self.train_labels == label)[:importance_per_class]
                for label in range(len(KJV_SECTIONS))
            ]
        )
        self.importance_batches = self._batches(self.train_texts[chosen], self.train_labels[chosen])
        self.test_batches = self._batches(self.test_texts, self.test_labels)
        self._predict = inference_function(classifier)

    @classmethod
    def create(cls, setting, seed):
        per_class = setting.train_per_class + setting.test_per_class
        fraction = setting.test_per_class / per_class
        train, test = load_kjv_sections(per_class, test_fraction=fraction, seed=seed)
        weights = load_minilm_weights()
        tokenizer = WordPieceTokenizer(weights.vocab_path, sequence_length=MAX_TOKENS)
        encoder = build_minilm_encoder(weights, head_mask=True)
        probabilities = keras.layers.Dense(len(KJV_SECTIONS), activation="softmax", name="probe")(
            encoder.output["sentence_embedding"]
        )
        classifier = keras.Model(encoder.input, probabilities, name="minilm_kjv_classifier")
        task = cls(classifier, tokenizer, train, test, setting.importance_per_class)
        task.train_probe()
        return task

    def train_probe(self):
        """Fits the linear probe on the frozen sentence embeddings."""
        encoder = keras.Model(
            self.classifier.input, self.classifier.get_layer("probe").input, name="features"
        )
        features = np.concatenate([encoder.predict_on_batch(x) for x, _ in self.train_batches])
        labels = np.concatenate([y for _, y in self.train_batches])
        weights = fit_linear_probe(features, labels, len(KJV_SECTIONS), steps=300)
        self.classifier.get_layer("probe").set_weights(weights)

    def evaluate(self, removed=None):
        """Per test verse, `{"correct": bool array, "loss": cross-entropy array}`.

        The heads in `removed` are masked; verses are in the order of the
        test batches, the same for every call.
        """
        mask = head_mask_array(self.classifier, removed or {})  # (layers, heads)
        correct, loss = [], []
        for x, y in self.test_batches:
            x = {**x, "head_mask": np.broadcast_to(mask, (len(y), *mask.shape))}
            probabilities = keras.ops.convert_to_numpy(self._predict(x))
            correct.append(np.argmax(probabilities, -1) == y)
            loss.append(-np.log(np.maximum(probabilities[np.arange(len(y)), y], 1e-12)))
        return {"correct": np.concatenate(correct), "loss": np.concatenate(loss)}

    def throughput(self, importance, setting):
        """Sentences per second of really pruned models, `MAX_TOKENS` tokens each.

        Every model runs once per round, in alternating order
        (`measure_throughput`): `throughput_rounds` rounds at batch 64 and
        four times as many at batch 1. The load average before and after is
        recorded with the speeds.
        """
        models = pruned_models(self.classifier, importance, setting.throughput_fractions)
        rows = [
            {"fraction": fraction, "parameters": model.count_params()}
            for fraction, model in models.items()
        ]
        load = {"load_average_before": list(os.getloadavg())}
        for batch in (1, BATCH_SIZE):
            rounds = setting.throughput_rounds * (4 if batch == 1 else 1)
            speeds = measure_throughput(
                list(models.values()), self._throughput_inputs(batch), rounds
            )
            for row, speed in zip(rows, speeds, strict=True):
                row[f"batch_{batch}"] = speed
                row[f"ratio_batch_{batch}"] = speed / speeds[0]
        load["load_average_after"] = list(os.getloadavg())
        return {"rows": rows, "rounds": setting.throughput_rounds, **load}

    def _throughput_inputs(self, batch):
        texts = list(np.resize(self.test_texts, batch))
        inputs = self.tokenizer(texts, pad_to=MAX_TOKENS)
        inputs["padding_mask"] = np.ones_like(inputs["padding_mask"])
        inputs["head_mask"] = np.ones((batch, self.num_layers, self.num_heads), "float32")
        return inputs

    def _batches(self, texts, labels):
        """Length-sorted batches padded to multiples of 16 tokens (few traces)."""
        order = np.argsort([len(self.tokenizer.encode(text)) for text in texts], kind="stable")
        batches = []
        for start in range(0, len(order), BATCH_SIZE):
            chosen = order[start : start + BATCH_SIZE]
            longest = max(len(self.tokenizer.encode(texts[i])) for i in chosen)
            x = self.tokenizer(list(texts[chosen]), pad_to=-(-longest // 16) * 16)
            x["head_mask"] = np.ones((len(chosen), self.num_layers, self.num_heads), "float32")
            batches.append((x, labels[chosen]))
        return batches


def _negated(scores):
    return {name: -score for name, score in scores.items()}


def _random_scores(scores, seed):
    rng = np.random.default_rng(seed)
    return {name: rng.random(len(score)) for name, score in scores.items()}


def _figure(results):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (curves, ablations, speed) = plt.subplots(1, 3, figsize=(15, 4))
    percent = np.array([100 * f for f in results["fractions"]])
    accuracy, intervals = results["accuracy"], results["accuracy_interval"]
    random = results["setting"]["random_orders"]
    labels = {
        "importance": ("o-", "least important first"),
        "importance_reestimated": ("s--", "re-estimated"),
        "random_mean": ("^-", f"random (mean of {random} orders)"),
        "reverse": ("v-", "most important first"),
    }
    for name, (style, label) in labels.items():
        if name not in accuracy:
            continue
        line = curves.plot(percent, accuracy[name], style, label=label)[0]
        low, high = np.array(intervals[name]).T
        curves.fill_between(percent, low, high, color=line.get_color(), alpha=0.15)
    curves.axhline(results["chance_accuracy"], color="grey", ls=":", label="chance")
    curves.set(
        xlabel="% of heads pruned",
        ylabel="test accuracy (95% bootstrap band)",
        title="Pruning MiniLM heads",
    )
    curves.legend(fontsize=8)
    rows = list(results["single_head_ablation_loss"].items())
    grid = np.array([values for _, values in rows]) - results["unpruned_loss"]
    limit = max(float(np.abs(grid).max()), 1e-3)
    image = ablations.imshow(grid, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
    ablations.set(
        xlabel="head",
        yticks=range(len(rows)),
        yticklabels=[name.split("/")[0] for name, _ in rows],
        ylabel="layer",
        title="Test loss change, one head removed",
    )
    figure.colorbar(image, ax=ablations)
    throughput = results["throughput"]["rows"]
    pruned = [100 * row["fraction"] for row in throughput]
    for batch in (1, BATCH_SIZE):
        speed.plot(
            pruned,
            [row[f"ratio_batch_{batch}"] for row in throughput],
            "o-",
            label=f"batch {batch}",
        )
    speed.set(xlabel="% of heads pruned", ylabel="throughput / unpruned", title="Measured speed")
    speed.legend(fontsize=8)
    figure.tight_layout()
    return figure


def _print_summary(results):
    names = list(results["accuracy"])
    print("test accuracy (loss) by % of heads pruned")
    print("pruned  " + "  ".join(f"{name:>22}" for name in names))
    for index, fraction in enumerate(results["fractions"]):
        cells = "  ".join(
            f"{results['accuracy'][name][index]:>14.3f} ({results['loss'][name][index]:.3f})"
            for name in names
        )
        print(f"{100 * fraction:>5.0f}%  {cells}")
    print("pruned  params     batch 1 (/s)  ratio  batch 64 (/s)  ratio")
    for row in results["throughput"]["rows"]:
        print(
            f"{100 * row['fraction']:>5.0f}%  {row['parameters']:>9,}  "
            f"{row['batch_1']:>11.1f}  {row['ratio_batch_1']:>5.2f}  "
            f"{row[f'batch_{BATCH_SIZE}']:>12.1f}  {row[f'ratio_batch_{BATCH_SIZE}']:>5.2f}"
        )
