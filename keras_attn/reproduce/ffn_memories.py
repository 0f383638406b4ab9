"""Feed-forward layers are key-value memories (Geva et al., 2021) on Jane Austen.

Trains the library's small word-level decoder language model on sentences
from Jane Austen's six novels (Debian `r-cran-janeaustenr`), then streams
the training sentences through it and measures, per layer: the agreement
between each value's top token and the next token of its key's top trigger
(against the shuffled-key null and `1/V`), the rank of that next token in
the value's distribution, the share of active memories, how often the
layer's prediction matches no memory, and whether the residual or the
feed-forward output decides the layer's top prediction, each with a 95%
bootstrap interval.
"""

import collections
import time

import keras
import numpy as np

from keras_attn.analysis.ffn_memories import analyze_memories, transformer_block_sites
from keras_attn.datasets.jane_austen import (
    load_jane_austen,
    split_chapters,
    split_sentences,
    split_words,
)
from keras_attn.models.decoder_language_model import build_decoder_language_model
from keras_attn.reproduce._run import choose_setting, finish
from keras_attn.utils.numpy_math import log_softmax
from keras_attn.utils.training import build_optimizer
from keras_attn.utils.validation import int_option

NAME = "ffn-memories"
HELP = "Key-value memories in the feed-forward layers of a word-level LM on Jane Austen."

PAD, UNKNOWN = 0, 1
SETTINGS = {
    # Vocabulary size, sentence length, model width / blocks / heads / FFN size,
    # epochs, sentences used (None: all) and sentences analysed.
    "small": dict(vocabulary=2000, length=16, hidden_dim=32, num_layers=2, num_heads=2,
                  intermediate_dim=128, epochs=1, sentences=1500, analysed=600),
    "fast": dict(vocabulary=5000, length=24, hidden_dim=64, num_layers=4, num_heads=4,
                 intermediate_dim=256, epochs=2, sentences=12000, analysed=4000),
    "full": dict(vocabulary=8000, length=24, hidden_dim=128, num_layers=6, num_heads=4,
                 intermediate_dim=1024, epochs=4, sentences=None, analysed=10000),
}  # fmt: skip


def add_arguments(parser):
    parser.add_argument(
        "--seed", type=int_option(0), default=0, help="seed of the weights and the split"
    )
    parser.add_argument(
        "--top-k",
        type=int_option(),
        default=50,
        help="trigger examples kept per key (50, as the official code)",
    )
    parser.add_argument(
        "--epochs", type=int_option(), default=None, help="training epochs (default: the setting's)"
    )


def run(args):
    setting, chosen = choose_setting(args, SETTINGS)
    config = dict(chosen)
    if args.epochs is not None:
        config["epochs"] = args.epochs
    keras.utils.set_random_seed(args.seed)
    start = time.time()
    sentences = _sentences(config["sentences"], args.seed)
    vocabulary = _vocabulary(sentences, config["vocabulary"])
    inputs, next_tokens = _encode(sentences, vocabulary, config["length"])
    split = int(0.95 * len(inputs))
    model = _train(inputs[:split], next_tokens[:split], config)
    held_out = _perplexity(model, inputs[split:], next_tokens[split:])
    analysed = slice(0, min(split, config["analysed"]))
    analysis = _analyse(model, inputs[analysed], next_tokens[analysed], args.top_k)
    words = np.array(["<pad>", "<unk>", *vocabulary])
    results = {
        "setting": setting,
        "config": config,
        "corpus": {"sentences": len(inputs), "vocabulary": len(words)},
        "held_out_perplexity": held_out,
        **analysis.summary(),
        "examples": _examples(analysis, inputs[analysed], words),
        "seconds": round(time.time() - start, 1),
    }
    figure = _figure(analysis)
    return finish(args, NAME, results, figure, started_at=start, setting=setting)


def _sentences(limit, seed):
    novels = load_jane_austen()
    sentences = [
        words
        for lines in novels.values()
        for chapter in split_chapters(lines)
        for sentence in split_sentences(chapter)
        if len(words := split_words(sentence)) >= 3
    ]
    order = np.random.default_rng(seed).permutation(len(sentences))
    return [sentences[i] for i in order[:limit]]


def _vocabulary(sentences, size):
    counts = collections.Counter(word for sentence in sentences for word in sentence)
    return [word for word, _ in counts.most_common(size - 2)]


def _encode(sentences, vocabulary, length):
    """Token ids: inputs are words `0..n-2`, next tokens words `1..n-1`, padded with 0."""
    ids = {word: index + 2 for index, word in enumerate(vocabulary)}
    encoded = np.full((len(sentences), length + 1), PAD, dtype=np.int32)
    for row, sentence in enumerate(sentences):
        tokens = [ids.get(word, UNKNOWN) for word in sentence[: length + 1]]
        encoded[row, : len(tokens)] = tokens
    return encoded[:, :-1], encoded[:, 1:]


def _train(inputs, next_tokens, config):
    model = build_decoder_language_model(
        config["vocabulary"],
        config["length"],
        hidden_dim=config["hidden_dim"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        intermediate_dim=config["intermediate_dim"],
    )
    model.compile(
        keras.optimizers.Adam(1e-3),
        keras.losses.SparseCategoricalCrossentropy(from_logits=True, ignore_class=PAD),
        jit_compile=True,
    )
    build_optimizer(model)
    model.fit(inputs, next_tokens, batch_size=64, epochs=config["epochs"], verbose=0)
    return model


def _perplexity(model, inputs, next_tokens):
    logits = keras.ops.convert_to_numpy(model.predict(inputs, batch_size=256, verbose=0))
    log_probs = log_softmax(logits)
    picked = np.take_along_axis(log_probs, next_tokens[..., None], axis=-1)[..., 0]
    valid = next_tokens != PAD
    return float(np.exp(-picked[valid].mean()))


def _analyse(model, inputs, next_tokens, top_k):
    final_norm = model.get_layer("final_norm")
    output = model.get_layer("output_embedding")
    embedding = keras.ops.convert_to_numpy(output.kernel)  # (hidden_dim, vocabulary)
    bias = keras.ops.convert_to_numpy(output.bias)

    def readout(hidden):
        return keras.ops.convert_to_numpy(final_norm(hidden)) @ embedding + bias

    batches = (
        (inputs[i : i + 128], next_tokens[i : i + 128], next_tokens[i : i + 128] != PAD)
        for i in range(0, len(inputs), 128)
    )
    sites = transformer_block_sites(model)
    return analyze_memories(model, batches, embedding, sites=sites, top_k=top_k, readout=readout)


def _examples(analysis, inputs, words, per_layer=3):
    """Top trigger prefixes of the keys with the highest top coefficients."""
    examples = []
    for layer, name in enumerate(analysis.site_names):
        best = np.argsort(-analysis.trigger_scores[layer][:, 0])[:per_layer]
        for key in best:
            triggers = analysis.trigger_prefixes(layer, int(key), inputs)[:3]
            examples.append(
                {
                    "layer": name,
                    "key": int(key),
                    "value_top_token": str(words[analysis.value_top_tokens[layer][key]]),
                    "triggers": [
                        {"prefix": " ".join(words[prefix]), "next": str(words[token])}
                        for prefix, token, _ in triggers
                    ],
                }
            )
    return examples


def _figure(analysis):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    layers = np.arange(1, len(analysis.site_names) + 1)
    figure, axes = plt.subplots(1, 4, figsize=(17, 3.6))

    def plot(axis, name, style, label, scale=100):
        low, high = scale * analysis.intervals[name].T
        middle = scale * getattr(analysis, name)
        axis.errorbar(layers, middle, yerr=[middle - low, high - middle], fmt=style, label=label)

    plot(axes[0], "agreement_rate", "o-", "value vs top trigger's next token")
    plot(axes[0], "official_agreement_rate", "D-", "value vs any top-k trigger (official)")
    plot(axes[0], "shuffled_agreement_rate", "s--", "shuffled keys (null)")
    axes[0].axhline(100 * analysis.random_baseline, color="gray", ls=":", label="1/V")
    axes[0].set(title="Agreement rate (%)", xlabel="layer")
    plot(axes[1], "next_token_rank", "o-", "value vs trigger", scale=1)
    plot(axes[1], "shuffled_next_token_rank", "s--", "shuffled keys (null)", scale=1)
    axes[1].set(title="Median rank of the trigger's next token", xlabel="layer", yscale="symlog")
    plot(axes[2], "active_fraction", "o-", "active memories")
    plot(axes[2], "zero_agreement_rate", "s-", "output matches no active memory")
    plot(axes[2], "official_zero_agreement_rate", "D-", "matches no memory (official)")
    plot(axes[2], "memory_sum_zero_agreement_rate", "^:", "memory sum matches none")
    axes[2].set(title="Per layer (%)", xlabel="layer", ylim=(0, 100))
    for axis in axes[:3]:
        axis.legend(fontsize=7)
    bottom = np.zeros(len(layers))
    for share, label in (
        (analysis.residual_kept, "residual kept"),
        (analysis.compromise, "compromise"),
        (analysis.ffn_override, "FFN override"),
    ):
        axes[3].bar(layers, 100 * share, bottom=bottom, label=label)
        bottom += 100 * share
    axes[3].set(title="Layer output's top token (%)", xlabel="layer")
    axes[3].legend(fontsize=8)
    figure.tight_layout()
    return figure
