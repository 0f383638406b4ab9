"""How transformers learn topic structure (Li, Li & Risteski, 2023).

Part 1 trains the paper's one-layer, one-head masked language model on LDA
documents in two configurations, on the same data and masks for each seed:
"joint" (every weight trained) and "official" (the official code's: frozen
one-hot embeddings, attention frozen uniform, decoder frozen to the
identity). At every step it records the same- vs different-topic word
embedding inner products, attention weights and the block gap of the value
matrix, and reports their mean ± std over seeds, when each statistic takes
off (the paper: the value / embedding structure first, the attention later)
and the end state (same-topic attention > 1/n > different-topic attention).

Part 2 measures the same statistics on the pretrained all-MiniLM-L6-v2:
topics are fitted with LDA (scikit-learn) on the chapters of Jane Austen's
novels; every topic's top words that are single WordPiece tokens are
compared through MiniLM's word embeddings, each layer's `E W_v W_o E^T`
value map, and the encoder's attention weights on Austen passages.
"""

import time

import keras
import numpy as np

from keras_attn.analysis.topic_structure import (
    TOPIC_CONFIGURATIONS,
    attention_topic_statistics,
    block_gap,
    generate_lda_documents,
    take_off_step,
    topic_pair_means,
    train_topic_model,
)
from keras_attn.reproduce._run import add_seeds_argument, choose_setting, finish, mean_and_std
from keras_attn.utils.validation import int_option

NAME = "topics"
HELP = "Topic structure in a one-layer attention model trained on LDA data, and in MiniLM."

SETTINGS = {
    "small": dict(documents=400, epochs=2, seeds=2, lda_topics=5, words_per_topic=10, passages=8),
    "fast": dict(documents=2000, epochs=3, seeds=2, lda_topics=10, words_per_topic=20, passages=64),
    "full": dict(
        documents=10000, epochs=2, seeds=3, lda_topics=20, words_per_topic=30, passages=256
    ),
}

PROBE_DOCUMENTS = 64
"""Held-out clean documents the attention statistics are measured on."""

CURVES = {
    "embedding_gap": lambda r: r["embedding_same_topic"] - r["embedding_different_topic"],
    "attention_same_over_uniform": lambda r: r["attention_same_over_uniform"],
    "attention_different_over_uniform": lambda r: r["attention_different_over_uniform"],
    "attention_gap": (
        lambda r: r["attention_same_over_uniform"] - r["attention_different_over_uniform"]
    ),
    "value_block_gap": lambda r: r["value_block_gap"],
}
"""Statistics recorded at every step, as functions of `topic_statistics`' record."""

MOVING = {
    "joint": ("value_block_gap", "embedding_gap", "attention_gap"),
    "official": ("value_block_gap",),
}
"""The statistics each configuration can change (the official one freezes the rest)."""


def add_arguments(parser):
    add_seeds_argument(parser, "small and fast 2, full 3")
    parser.add_argument(
        "--seed",
        type=int_option(0),
        default=0,
        help="seed of the MiniLM part (LDA fit and passages)",
    )
    parser.add_argument(
        "--skip-minilm", action="store_true", help="only the synthetic LDA experiment"
    )


def run(args):
    setting, config = choose_setting(args, SETTINGS)
    seeds = args.seeds or config["seeds"]
    if seeds < 1:
        raise ValueError(f"`--seeds` must be at least 1. Received: --seeds {seeds}")
    start = time.time()
    results = {"setting": setting, "config": {**config, "seeds": seeds}}
    results["synthetic"] = synthetic_experiment(config["documents"], config["epochs"], range(seeds))
    if not args.skip_minilm:
        results["minilm"] = minilm_experiment(
            config["lda_topics"], config["words_per_topic"], config["passages"], args.seed
        )
    results["seconds"] = round(time.time() - start, 1)
    figure = _figure(results["synthetic"])
    return finish(args, NAME, results, figure, started_at=start, setting=setting)


def synthetic_experiment(documents, epochs, seeds):
    """Both configurations trained on the same LDA data and masks for each seed.

    Returns:
        dict `configuration -> summary` (see `_summary`).
    """
    runs = {configuration: [] for configuration in TOPIC_CONFIGURATIONS}
    for seed in seeds:
        corpus = generate_lda_documents(documents, seed=seed)
        probe = generate_lda_documents(PROBE_DOCUMENTS, seed=10_000 + seed)
        for configuration in TOPIC_CONFIGURATIONS:
            started = time.time()
            _, history = train_topic_model(
                corpus, probe.tokens, epochs=epochs, seed=seed, configuration=configuration
            )
            runs[configuration].append(history)
            seconds = time.time() - started
            print(f"{configuration}, seed {seed}: {len(history)} records in {seconds:.0f} s")
    return {
        "documents": documents,
        "epochs": epochs,
        "seeds": list(seeds),
        **{configuration: _summary(runs[configuration], configuration) for configuration in runs},
    }


def _summary(histories, configuration):
    """Per-step curves (per seed, mean and std), end state and take-off steps."""
    steps = [record["step"] for record in histories[0]]
    per_seed = {
        name: np.array([[curve(record) for record in history] for history in histories])
        for name, curve in CURVES.items()
    }  # name -> (seeds, steps)
    finals = [history[-1] for history in histories]
    take_off = {
        name: [take_off_step(history, CURVES[name]) for history in histories]
        for name in MOVING[configuration]
    }
    summary = {
        "steps": steps,
        "curves": {
            name: {
                "mean": values.mean(axis=0).tolist(),
                "std": (values.std(axis=0, ddof=1) if len(values) > 1 else 0 * values[0]).tolist(),
                "per_seed": np.round(values, 6).tolist(),
            }
            for name, values in per_seed.items()
        },
        "final": {
            key: mean_and_std([final[key] for final in finals])
            for key in finals[0]
            if key != "step"
        },
        "final_curves": {name: mean_and_std(values[:, -1]) for name, values in per_seed.items()},
        "end_state_holds": [
            bool(
                final["attention_same_topic"]
                > final["attention_uniform"]
                > final["attention_different_topic"]
            )
            for final in finals
        ],
        "take_off_step": {
            name: {**mean_and_std(values), "per_seed": values} for name, values in take_off.items()
        },
    }
    if configuration == "joint":
        summary["value_before_attention"] = [
            value < attention
            for value, attention in zip(
                take_off["value_block_gap"], take_off["attention_gap"], strict=True
            )
        ]
    return summary


def minilm_experiment(num_topics, words_per_topic, num_passages, seed):
    """Same- vs different-topic statistics of the pretrained MiniLM.

    Weight-only: word embedding inner products and, per layer, the block
    gap of `E W_v W_o E^T` over the topic words (all heads together). With
    the encoder: per layer, the head-averaged attention that a topic word
    pays to one same-topic and one different-topic word in Jane Austen
    passages, against `1/n`.
    """
    from keras_attn.pretrained import load_minilm_weights

    weights = load_minilm_weights()
    vocabulary = weights.vocab_path.read_text(encoding="utf-8").splitlines()
    ids = {token: index for index, token in enumerate(vocabulary)}
    topic_words = fit_austen_topics(num_topics, words_per_topic, seed, keep=ids.__contains__)
    token_ids = np.array([ids[word] for words in topic_words for word in words])
    topics = np.repeat(np.arange(len(topic_words)), [len(words) for words in topic_words])
    embedding = weights.tensors["embeddings.word_embeddings.weight"][token_ids]  # (words, dim)
    normalized = embedding / np.linalg.norm(embedding, axis=1, keepdims=True)
    value_gaps = []
    for layer in range(weights.num_layers):
        kernels = weights.attention_kernels(layer)
        value = kernels["value"].reshape(weights.hidden_size, -1)  # (dim, heads * head_dim)
        output = kernels["output"].reshape(-1, weights.hidden_size)  # (heads * head_dim, dim)
        value_map = embedding @ value @ output @ embedding.T  # (words, words)
        value_gaps.append(float(block_gap(value_map, topics)))
    same, different = topic_pair_means(embedding @ embedding.T, topics)
    same_cos, different_cos = topic_pair_means(normalized @ normalized.T, topics)
    vocabulary_topics = np.full(len(vocabulary), -1)
    vocabulary_topics[token_ids] = topics
    return {
        "topics": [list(words) for words in topic_words],
        "embedding_same_topic": same,
        "embedding_different_topic": different,
        "cosine_same_topic": same_cos,
        "cosine_different_topic": different_cos,
        "value_block_gap_per_layer": value_gaps,
        "attention_per_layer": _minilm_attention(weights, vocabulary_topics, num_passages, seed),
    }


def _minilm_attention(weights, vocabulary_topics, num_passages, seed, words_per_passage=96):
    """Head-averaged topic attention statistics of each MiniLM layer on Austen passages."""
    from keras_attn.datasets.jane_austen import load_jane_austen, split_chapters
    from keras_attn.pretrained import build_minilm_encoder
    from keras_attn.text import WordPieceTokenizer

    words = " ".join(
        chapter for lines in load_jane_austen().values() for chapter in split_chapters(lines)
    ).split()
    starts = np.random.default_rng(seed).choice(
        len(words) - words_per_passage, size=num_passages, replace=False
    )
    passages = [" ".join(words[s : s + words_per_passage]) for s in np.sort(starts)]
    tokenizer = WordPieceTokenizer(weights.vocab_path, sequence_length=256)
    encoder = build_minilm_encoder(weights, output_attention_scores=True)
    per_layer = [[] for _ in range(weights.num_layers)]
    for first in range(0, num_passages, 16):
        inputs = tokenizer(passages[first : first + 16])
        outputs = encoder.predict_on_batch(inputs)
        scores = keras.ops.convert_to_numpy(outputs["attention_scores"])  # (b, layers, heads, L, L)
        for layer in range(weights.num_layers):
            per_layer[layer].append(
                (
                    attention_topic_statistics(
                        scores[:, layer].mean(axis=1), inputs["token_ids"], vocabulary_topics
                    ),
                    len(inputs["token_ids"]),
                )
            )
    return [
        {
            key: float(np.average([s[key] for s, _ in batches], weights=[n for _, n in batches]))
            for key in ("same_topic", "different_topic", "uniform")
        }
        for batches in per_layer
    ]


def fit_austen_topics(num_topics, words_per_topic, seed, keep=lambda word: True):
    """LDA topics of Jane Austen's chapters: the top words of each topic.

    Args:
        num_topics: int, LDA topics.
        words_per_topic: int, words kept per topic.
        seed: int, seed of scikit-learn's LDA.
        keep: predicate on a word (for example "is a single WordPiece token").

    Returns:
        list of lists of words; a word appears in one topic only (the first
        topic, in order, that ranks it).
    """
    from sklearn.decomposition import LatentDirichletAllocation
    from sklearn.feature_extraction.text import CountVectorizer

    from keras_attn.datasets.jane_austen import load_jane_austen, split_chapters

    chapters = [
        chapter for lines in load_jane_austen().values() for chapter in split_chapters(lines)
    ]
    vectorizer = CountVectorizer(stop_words="english", min_df=3, max_df=0.5)
    counts = vectorizer.fit_transform(chapters)  # (chapters, words)
    lda = LatentDirichletAllocation(num_topics, learning_method="batch", random_state=seed)
    lda.fit(counts)
    names = vectorizer.get_feature_names_out()
    taken, topics = set(), []
    for weights in lda.components_:
        words = [w for w in names[np.argsort(-weights)] if keep(w) and w not in taken]
        topics.append(words[:words_per_topic])
        taken.update(topics[-1])
    return topics


def _figure(synthetic):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels = (
        ("value_block_gap", "Block gap of E W_v W_o D"),
        ("attention_same_over_uniform", "Attention per key word / (1/n)"),
        ("embedding_gap", "Embedding inner product: same − different topic"),
    )
    figure, axes = plt.subplots(1, 3, figsize=(14, 3.8))
    for configuration, color in zip(TOPIC_CONFIGURATIONS, ("C0", "C1"), strict=True):
        summary = synthetic[configuration]
        steps = np.array(summary["steps"])
        for axis, (name, title) in zip(axes, panels, strict=True):
            names = [name]
            if name == "attention_same_over_uniform":
                names.append("attention_different_over_uniform")
            for curve_name, style in zip(names, ("-", "--"), strict=False):
                curve = summary["curves"][curve_name]
                mean, std = np.array(curve["mean"]), np.array(curve["std"])
                label = configuration
                if len(names) == 2:
                    label += " (different topic)" if style == "--" else " (same topic)"
                axis.plot(steps, mean, style, color=color, label=label)
                axis.fill_between(steps, mean - std, mean + std, color=color, alpha=0.25)
            axis.set(title=title, xlabel="step")
    axes[1].axhline(1.0, color="k", ls=":", lw=1)
    for axis in axes:
        axis.set_xscale("symlog", linthresh=10)
        axis.legend(fontsize=8)
    seeds = len(synthetic["seeds"])
    figure.suptitle(f"Mean ± std over {seeds} seeds; joint vs official (frozen) configuration")
    figure.tight_layout()
    return figure
