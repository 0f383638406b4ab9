import os
import shutil

import pytest
from installed_data import needs_data

from keras_attn.datasets import CorruptDataError, DatasetNotFoundError, load_jane_austen
from keras_attn.datasets import jane_austen as module
from keras_attn.datasets.jane_austen import split_chapters, split_sentences, split_words

needs_package = needs_data(
    lambda: os.path.isfile(os.path.join(module._data_dir(None), "Rdata.rdb")), "janeausten"
)


@needs_package
def test_reads_the_novels():
    novels = load_jane_austen(books=["prideprejudice", "persuasion"])
    assert list(novels) == ["prideprejudice", "persuasion"]
    lines = novels["prideprejudice"]
    assert len(lines) == 13030 and lines[0] == "PRIDE AND PREJUDICE"
    assert lines[9] == "It is a truth universally acknowledged, that a single man in possession"
    chapters = split_chapters(lines)
    assert len(chapters) == 61
    assert split_sentences(chapters[0])[2].startswith('"My dear Mr. Bennet," said his lady')
    assert len(split_chapters(novels["persuasion"])) == 24


@needs_package
@pytest.mark.parametrize("cut", [True, False])
def test_a_damaged_record_is_refused(tmp_path, cut):
    """A copy of the data whose `.rdb` is cut inside a record, or has bytes of it zeroed."""
    folder = module._data_dir(None)
    shutil.copy(os.path.join(folder, "Rdata.rdx"), tmp_path)
    offset, length = module._read_index(os.path.join(folder, "Rdata.rdx"))["persuasion"]
    with open(os.path.join(folder, "Rdata.rdb"), "rb") as f:
        records = f.read()
    middle = offset + length // 2
    damaged = records[:middle] if cut else records[:middle] + b"\0" * 64 + records[middle + 64 :]
    (tmp_path / "Rdata.rdb").write_bytes(damaged)
    message = (
        "is truncated: record `persuasion` has" if cut else "Record `persuasion` of .* corrupt"
    )
    with pytest.raises(CorruptDataError, match=message) as info:
        load_jane_austen(books=["persuasion"], path=str(tmp_path))
    assert "Rdata.rdb" in str(info.value)


def test_text_helpers():
    lines = ["TITLE", "", "Chapter 1", "", "One line", "goes on.", "", "", "Next.", "CHAPTER II"]
    assert split_chapters(lines + ["Two! Yes?"]) == ["One line goes on.\nNext.", "Two! Yes?"]
    assert split_sentences('Mr. Darcy came.  She didn\'t!  "Why?" Then') == [
        "Mr. Darcy came.",
        "She didn't!",
        '"Why?"',
        "Then",
    ]
    assert split_words("She didn't -- Mr. Darcy's!") == ["she", "didn't", "mr", "darcy's"]


def test_missing_source_and_bad_books(tmp_path):
    with pytest.raises(DatasetNotFoundError, match="keras_attn.datasets.fetch janeausten"):
        load_jane_austen(path=str(tmp_path))
    with pytest.raises(ValueError, match="Received: books=\\['ulysses'\\]"):
        load_jane_austen(books=["ulysses"], path=str(tmp_path))


@needs_package
def test_the_data_cache_comes_before_the_debian_location(monkeypatch, tmp_path):
    cached = tmp_path / "janeaustenr" / "data"
    cached.mkdir(parents=True)
    for name in ("Rdata.rdx", "Rdata.rdb"):
        (cached / name).symlink_to(os.path.join(module._data_dir(None), name))
    monkeypatch.delenv("KERAS_ATTN_JANEAUSTENR_DIR", raising=False)
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    assert module._data_dir(None) == str(cached)
    assert load_jane_austen(books=["emma"])["emma"][0].strip().upper() == "EMMA"
    monkeypatch.setattr(module, "DEFAULT_DIR", str(tmp_path / "nowhere"))
    (cached / "Rdata.rdb").unlink()
    with pytest.raises(DatasetNotFoundError, match="nowhere"):
        load_jane_austen()
