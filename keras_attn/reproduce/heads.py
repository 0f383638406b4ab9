"""Reproduction of Michel et al. (2019), "Are sixteen heads really better than
one?" (https://arxiv.org/abs/1905.10650), on the pretrained all-MiniLM-L6-v2.

Task: which of the seven traditional sections of the King James Bible a verse
comes from (`load_kjv_sections`), with a linear classifier trained on the
frozen MiniLM sentence embeddings. Heads are scored by `head_importance` on
the training verses, then 0-90% of the 72 heads are pruned in 10% steps in
three orders (least important first, most important first, random), keeping
one head per layer; quality is the test accuracy (and cross-entropy) of the
unchanged classifier.
Also: accuracy with each single head removed, and the measured throughput of
the really pruned models at batch 1 and 64.
"""

import dataclasses
import time

import keras
import numpy as np

from keras_attn.datasets import KJV_SECTIONS, load_kjv_sections
from keras_attn.pretrained import build_minilm_encoder, load_minilm_weights
from keras_attn.pruning import (
    head_importance,
    head_mask_array,
    measure_throughput,
    prune_heads,
    scores_of_kept_heads,
    select_heads,
    single_head_ablations,
)
from keras_attn.reproduce._run import choose_setting, finish
from keras_attn.text import WordPieceTokenizer

NAME = "heads"
HELP = "Head importance and pruning of MiniLM on Bible-section classification (Michel et al.)."

MAX_TOKENS = 64
BATCH_SIZE = 64
FRACTIONS = tuple(step / 10 for step in range(10))


@dataclasses.dataclass(frozen=True)
class Setting:
    train_per_class: int
    test_per_class: int
    fractions: tuple
    random_seeds: int
    ablation_layers: tuple
    reestimate: bool
    throughput_fractions: tuple
    throughput_repeats: int


SETTINGS = {
    "small": Setting(3, 2, (0.0, 0.5, 0.9), 1, (5,), False, (0.0, 0.5), 1),
    "fast": Setting(20, 10, FRACTIONS, 1, tuple(range(6)), False, (0.0, 0.5, 0.9), 3),
    "full": Setting(30, 30, FRACTIONS, 2, tuple(range(6)), True, FRACTIONS, 5),
}


def add_arguments(parser):
    parser.add_argument("--seed", type=int, default=0, help="Seed of the data and orderings.")


def run(args):
    started_at = time.time()
    size, setting = choose_setting(args, SETTINGS)
    keras.utils.set_random_seed(args.seed)
    start = time.perf_counter()
    task = PruningTask.create(setting, args.seed)
    importance = head_importance(task.classifier, task.train_batches, task.loss)
    print(f"probe trained and heads scored in {time.perf_counter() - start:.0f} s")
    curves = {
        "importance": task.curve(lambda count: select_heads(importance, count)),
        "reverse": task.curve(lambda count: select_heads(_negated(importance), count)),
    }
    for seed in range(setting.random_seeds):
        scores = _random_scores(importance, args.seed + seed)
        curves[f"random_{seed}"] = task.curve(lambda count, s=scores: select_heads(s, count))
    if setting.reestimate:
        curves["importance_reestimated"] = task.reestimated_curve(importance)
    print(f"pruning curves done at {time.perf_counter() - start:.0f} s")
    ablations = task.single_head_ablations(setting.ablation_layers)
    print(f"single-head ablations done at {time.perf_counter() - start:.0f} s")
    throughput = task.throughput(importance, setting)
    print(f"throughput measured at {time.perf_counter() - start:.0f} s")
    results = {
        "setting": dataclasses.asdict(setting),
        "task": "KJV verse -> one of 7 Bible sections, linear probe on frozen MiniLM",
        "sections": [section[0] for section in KJV_SECTIONS],
        "num_train": len(task.train_labels),
        "num_test": len(task.test_labels),
        "fractions": list(setting.fractions),
        "accuracy": {name: [q[0] for q in curve] for name, curve in curves.items()},
        "loss": {name: [q[1] for q in curve] for name, curve in curves.items()},
        "importance": {name: score.tolist() for name, score in importance.items()},
        "single_head_ablation_accuracy": {
            name: [q[0] for q in values] for name, values in ablations.items()
        },
        "single_head_ablation_loss": {
            name: [q[1] for q in values] for name, values in ablations.items()
        },
        "unpruned_accuracy": curves["importance"][0][0],
        "unpruned_loss": curves["importance"][0][1],
        "throughput": throughput,
        "seconds": time.perf_counter() - start,
    }
    _print_summary(results)
    figure = _figure(results)
    return finish(args, NAME, results, figure, started_at=started_at, setting=size)


class PruningTask:
    """The classifier, the tokenized data and the quality measure."""

    def __init__(self, classifier, tokenizer, train, test, fractions):
        self.classifier = classifier
        self.fractions = fractions
        self.tokenizer = tokenizer
        self.train_texts, self.train_labels = train
        self.test_texts, self.test_labels = test
        self.num_layers = 6
        self.num_heads = 12
        self.loss = keras.losses.SparseCategoricalCrossentropy()
        self.train_batches = self._batches(self.train_texts, self.train_labels)
        self.test_batches = self._batches(self.test_texts, self.test_labels)
        self._predict = _compiled(classifier)

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
        task = cls(classifier, tokenizer, train, test, setting.fractions)
        task.train_probe()
        return task

    def train_probe(self):
        """Fits the linear probe on the frozen sentence embeddings."""
        encoder = keras.Model(
            self.classifier.input, self.classifier.get_layer("probe").input, name="features"
        )
        features = np.concatenate([encoder.predict_on_batch(x) for x, _ in self.train_batches])
        labels = np.concatenate([y for _, y in self.train_batches])
        probe = keras.Sequential(
            [keras.Input((features.shape[-1],)), keras.layers.Dense(len(KJV_SECTIONS))]
        )
        probe.compile(
            keras.optimizers.Adam(0.01),
            keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        )
        probe.fit(features, labels, epochs=300, batch_size=len(labels), verbose=0)
        self.classifier.get_layer("probe").set_weights(probe.get_weights())

    def quality(self, removed=None):
        """`(accuracy, mean cross-entropy)` on the test verses, `removed` heads masked."""
        mask = head_mask_array(self.classifier, removed or {})  # (layers, heads)
        correct, loss = 0, 0.0
        for x, y in self.test_batches:
            x = {**x, "head_mask": np.broadcast_to(mask, (len(y), *mask.shape))}
            probabilities = keras.ops.convert_to_numpy(self._predict(x))
            correct += int((np.argmax(probabilities, -1) == y).sum())
            loss -= float(np.log(np.maximum(probabilities[np.arange(len(y)), y], 1e-12)).sum())
        return correct / len(self.test_labels), loss / len(self.test_labels)

    def curve(self, choose):
        """Accuracy at each pruning fraction for heads chosen by `choose(count)`."""
        total = self.num_layers * self.num_heads
        return [self.quality(choose(round(f * total))) for f in self.fractions]

    def reestimated_curve(self, importance):
        """Prunes 10% more at each step, re-scoring the remaining heads first."""
        total, removed, qualities = self.num_layers * self.num_heads, {}, []
        for fraction in self.fractions:
            scores = importance
            if removed:
                pruned = prune_heads(self.classifier, removed)
                scores = scores_of_kept_heads(
                    head_importance(pruned, self.train_batches, self.loss), removed, importance
                )
            removed = select_heads(scores, round(fraction * total))
            qualities.append(self.quality(removed))
        return qualities

    def single_head_ablations(self, layers):
        """`(accuracy, loss)` with one head removed, `{layer name: [per head]}`."""
        return single_head_ablations(self.classifier, self.quality, layers)

    def throughput(self, importance, setting):
        """Sentences per second of really pruned models, `MAX_TOKENS` tokens each."""
        total = self.num_layers * self.num_heads
        models = {}
        for fraction in setting.throughput_fractions:
            removed = select_heads(importance, round(fraction * total))
            models[fraction] = prune_heads(self.classifier, removed) if removed else self.classifier
        rows = [
            {"fraction": fraction, "parameters": model.count_params()}
            for fraction, model in models.items()
        ]
        for batch in (1, BATCH_SIZE):
            repeats = setting.throughput_repeats * (8 if batch == 1 else 1)
            speeds = measure_throughput(
                list(models.values()), self._throughput_inputs(batch), repeats
            )
            for row, speed in zip(rows, speeds, strict=True):
                row[f"batch_{batch}"] = speed
                row[f"ratio_batch_{batch}"] = speed / speeds[0]
        return rows

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


def _compiled(model):
    import tensorflow as tf

    return tf.function(model, reduce_retracing=True)


def _negated(scores):
    return {name: -score for name, score in scores.items()}


def _random_scores(scores, seed):
    rng = np.random.default_rng(seed)
    return {name: rng.random(len(score)) for name, score in scores.items()}


def _figure(results):
    import matplotlib.pyplot as plt

    figure, (curves, ablations, speed) = plt.subplots(1, 3, figsize=(15, 4))
    percent = [100 * f for f in results["fractions"]]
    accuracy = results["accuracy"]
    random = np.array([v for k, v in accuracy.items() if k.startswith("random")])
    curves.plot(percent, accuracy["importance"], "o-", label="least important first")
    if "importance_reestimated" in accuracy:
        curves.plot(percent, accuracy["importance_reestimated"], "s--", label="re-estimated")
    curves.plot(percent, random.mean(0), "^-", label=f"random (mean of {len(random)})")
    curves.plot(percent, accuracy["reverse"], "v-", label="most important first")
    curves.axhline(1 / len(results["sections"]), color="grey", ls=":", label="chance")
    curves.set(xlabel="% of heads pruned", ylabel="test accuracy", title="Pruning MiniLM heads")
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
    throughput = results["throughput"]
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
    for row in results["throughput"]:
        print(
            f"{100 * row['fraction']:>5.0f}%  {row['parameters']:>9,}  "
            f"{row['batch_1']:>11.1f}  {row['ratio_batch_1']:>5.2f}  "
            f"{row[f'batch_{BATCH_SIZE}']:>12.1f}  {row[f'ratio_batch_{BATCH_SIZE}']:>5.2f}"
        )
