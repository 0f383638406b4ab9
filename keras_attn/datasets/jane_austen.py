"""Jane Austen's six novels, read from the R data of `r-cran-janeaustenr`.

Setup (`python -m keras_attn.datasets.fetch janeausten`, run by
`bash scripts/setup.sh`) fetches the Debian package's `.deb` alone with
`apt-get download` and extracts its data folder into the data cache, so R
and its hundreds of Debian packages are never installed. A system-wide
install of the package is read too.

The Debian package stores the novels as an R lazy-load database
(`data/Rdata.rdx` index plus `data/Rdata.rdb` records). The index is a
gzip-compressed serialized R list that maps each object name to an
`(offset, length)` record in the `.rdb` file; each record is a 4-byte
big-endian uncompressed size followed by a zlib stream of the serialized
character vector. Both are parsed with the pure-Python `rdata` package, so
R itself is never run.
"""

import gzip
import os
import re
import struct
import warnings
import zlib
from collections.abc import Sequence

import numpy as np

from keras_attn._optional import require
from keras_attn.datasets.data_cache import data_dir
from keras_attn.datasets.errors import CorruptDataError, DatasetNotFoundError

DEFAULT_DIR = "/usr/lib/R/site-library/janeaustenr/data"
"""Folder where `apt-get install r-cran-janeaustenr` puts the R data."""

BOOKS = (
    "sensesensibility",
    "prideprejudice",
    "mansfieldpark",
    "emma",
    "northangerabbey",
    "persuasion",
)
"""R object names of the novels, in order of publication."""

_INSTALL_HINT = (
    "keras_attn never downloads data at run time; the novels ship in the Debian package "
    "`r-cran-janeaustenr`. Put its data folder in the data cache, without installing R, "
    "with `python -m keras_attn.datasets.fetch janeausten` (or "
    "`sudo apt-get install r-cran-janeaustenr`), or pass `path=` (or set "
    "`KERAS_ATTN_JANEAUSTENR_DIR`) to a folder holding its `Rdata.rdx` and `Rdata.rdb`."
)


def load_jane_austen(
    books: Sequence[str] | None = None, path: str | os.PathLike | None = None
) -> dict[str, list[str]]:
    """Loads the text of Jane Austen's novels, line by line.

    The source is the data folder of the Debian package `r-cran-janeaustenr`
    (MIT; the novels are public domain, about 725,000 words), put in the data
    cache by `python -m keras_attn.datasets.fetch janeausten`: the Project Gutenberg text of
    *Sense & Sensibility*, *Pride & Prejudice*, *Mansfield Park*, *Emma*,
    *Northanger Abbey* and *Persuasion*, one string per printed line, with
    empty strings between paragraphs.

    Args:
        books: optional sequence of names from `BOOKS`; all six by default.
        path: optional folder with `Rdata.rdx` and `Rdata.rdb`. Defaults to
            `KERAS_ATTN_JANEAUSTENR_DIR` if set, else the data cache's
            `janeaustenr/data` if it has the files, else the Debian location.

    Returns:
        dict mapping each book name to a list of `str` lines, in the order
        of `books`.

    Raises:
        DatasetNotFoundError: if the R data files are not found.
        ValueError: if a book name is unknown.
        CorruptDataError: (a `ValueError`) if a file is truncated or malformed.
        ImportError: if rdata (the `reproduce` extra) is not installed.

    Example:

    ```python
    novels = load_jane_austen(books=["prideprejudice"])
    novels["prideprejudice"][9]
    # 'It is a truth universally acknowledged, that a single man in possession'
    ```
    """
    books = _check_books(books)
    folder = _data_dir(path)
    index = _read_index(os.path.join(folder, "Rdata.rdx"))
    with open(os.path.join(folder, "Rdata.rdb"), "rb") as records:
        return {book: _read_record(records, index, book) for book in books}


def split_chapters(lines):
    """Joins a novel's lines into chapters (text after each "Chapter N" heading).

    Args:
        lines: list of `str`, one novel as returned by `load_jane_austen`.

    Returns:
        list of `str`, one per chapter, paragraphs separated by newlines.
    """
    chapters, current = [], None
    for line in lines:
        if _CHAPTER_HEADING.match(line):
            current = []
            chapters.append(current)
        elif current is not None:
            current.append(line)
    return [
        "\n".join(" ".join(p.split()) for p in "\n".join(c).split("\n\n") if p.strip())
        for c in chapters
    ]


def split_sentences(text):
    """Splits text into sentences after `.`, `!` and `?` (not after Mr., Mrs., Dr., St.)."""
    flat = " ".join(text.split())
    return [s.strip() for s in _SENTENCE_END.split(flat) if s.strip()]


def split_words(text):
    """Lower-cased words (letters and inner apostrophes) of `text`, punctuation dropped."""
    return _WORD.findall(text.lower())


_CHAPTER_HEADING = re.compile(r"^\s*chapter\s+([0-9]+|[ivxlc]+)\b", re.IGNORECASE)
_SENTENCE_END = re.compile(
    r"(?:(?<=[.!?])(?<!\bMr\.)(?<!\bMrs\.)(?<!\bDr\.)(?<!\bSt\.)|(?<=[.!?][\"'_)]))\s+"
)
_WORD = re.compile(r"[a-z]+(?:'[a-z]+)?")


def _check_books(books):
    if books is None:
        return list(BOOKS)
    books = [books] if isinstance(books, str) else list(books)
    unknown = [book for book in books if book not in BOOKS]
    if unknown or not books:
        raise ValueError(
            f"`books` must be a non-empty subset of {BOOKS}. Received: books={books!r}"
        )
    return books


def _data_dir(path):
    folder = path or os.environ.get("KERAS_ATTN_JANEAUSTENR_DIR")
    if not folder:
        cached = data_dir() / "janeaustenr" / "data"
        folder = str(cached) if (cached / "Rdata.rdb").is_file() else DEFAULT_DIR
    missing = [
        name
        for name in ("Rdata.rdx", "Rdata.rdb")
        if not os.path.isfile(os.path.join(folder, name))
    ]
    if missing:
        raise DatasetNotFoundError(
            f"The Jane Austen novels were not found: no {' or '.join(missing)} in "
            f"'{folder}'. {_INSTALL_HINT}"
        )
    return folder


def _parse_r_object(serialized):
    rdata = require("rdata", "reproduce")

    with warnings.catch_warnings():
        # The records carry no RDS/RDA header; rdata says so and parses them.
        warnings.simplefilter("ignore", UserWarning)
        return rdata.conversion.convert(rdata.parser.parse_data(serialized))


def _read_index(path):
    with open(path, "rb") as f:
        index = _parse_r_object(gzip.decompress(f.read()))
    try:
        return {
            str(name): tuple(int(v) for v in where) for name, where in index["variables"].items()
        }
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"{path} is not an R lazy-load index.") from error


def _read_record(records, index, book):
    if book not in index:
        raise ValueError(f"The R data has no object `{book}`; found {sorted(index)}.")
    offset, length = index[book]
    records.seek(offset)
    record = records.read(length)
    if len(record) != length or length < 4:
        raise CorruptDataError(
            f"{records.name} is truncated: record `{book}` has {len(record)} of its {length} bytes."
        )
    (size,) = struct.unpack(">I", record[:4])  # uncompressed size
    try:
        serialized = zlib.decompress(record[4:])
    except zlib.error as error:
        raise CorruptDataError(f"Record `{book}` of {records.name} is corrupt: {error}.") from error
    if len(serialized) != size:
        raise CorruptDataError(
            f"Record `{book}` of {records.name} is corrupt: {len(serialized)} bytes, "
            f"expected {size}."
        )
    lines = np.asarray(_parse_r_object(serialized))
    if lines.ndim != 1:
        raise ValueError(f"Record `{book}` is not a character vector.")
    return [str(line) for line in lines]
