"""Argument checks, file checks and splitting shared by the data loaders (private)."""

import gzip
import numbers
from typing import TypeAlias

import numpy as np

from keras_attn.datasets.errors import CorruptDataError

TrainTestSplit: TypeAlias = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]
"""`((x_train, y_train), (x_test, y_test))`, the numpy arrays a loader returns."""


def check_split(test_fraction, seed):
    """`(test_fraction, seed)` of `stratified_split`, checked, or raises `ValueError`."""
    return _check_test_fraction(test_fraction), _check_seed(seed)


def _check_test_fraction(test_fraction):
    """Returns `test_fraction` as a float, or raises `ValueError`."""
    if (
        isinstance(test_fraction, bool)
        or not isinstance(test_fraction, numbers.Real)
        or not 0.0 < float(test_fraction) < 1.0
    ):
        raise ValueError(
            f"`test_fraction` must be in (0, 1). Received: test_fraction={test_fraction!r}"
        )
    return float(test_fraction)


def _check_seed(seed):
    """Returns `seed` as an int, or raises `ValueError`."""
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0:
        raise ValueError(f"`seed` must be a non-negative integer. Received: seed={seed!r}")
    return int(seed)


def check_limit(limit):
    """Returns `limit` as an int (or `None`), or raises `ValueError`."""
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, numbers.Integral) or limit < 1:
        raise ValueError(f"`limit` must be a positive integer or None. Received: limit={limit!r}")
    return int(limit)


def stratified_split(x, y, test_fraction, seed):
    """Deterministic stratified train/test split of the examples `x` and labels `y`.

    Every class contributes `round(count * test_fraction)` samples to the test
    split (at least one, and at least one left for training, when the class
    has two or more samples). Both index arrays come back shuffled, so that
    samples stored grouped by class are not grouped in the result.

    Args:
        x: numpy array of examples, one per label.
        y: 1D integer array of labels.
        test_fraction: float in (0, 1).
        seed: non-negative int seeding `numpy.random.default_rng`.

    Returns:
        `((x_train, y_train), (x_test, y_test))`, a `TrainTestSplit`.
    """
    rng = np.random.default_rng(seed)
    train_parts, test_parts = [], []
    for label in np.unique(y):
        members = rng.permutation(np.flatnonzero(y == label))
        n_test = int(round(members.size * test_fraction))
        if members.size >= 2:
            n_test = min(max(n_test, 1), members.size - 1)
        test_parts.append(members[:n_test])
        train_parts.append(members[n_test:])
    train = rng.permutation(np.concatenate(train_parts)).astype(np.int64)
    test = rng.permutation(np.concatenate(test_parts)).astype(np.int64)
    return (x[train], y[train]), (x[test], y[test])


def read_numbers(path, columns, delimiter=None, header_lines=0, integers=False):
    """Reads a text table of numbers (gzip-compressed when `path` ends in `.gz`).

    Args:
        path: the file.
        columns: the number of values on every line.
        delimiter: the column separator; `None` for any whitespace.
        header_lines: lines to skip at the top.
        integers: whether every value is written as an integer (parsed
            several times faster than floats).

    Returns:
        float64 array (int64 with `integers=True`) of shape `(rows, columns)`.

    Raises:
        CorruptDataError: naming the file and the first line that does not
            hold `columns` numbers (a file cut in the middle of a line, say).
    """
    dtype = np.int64 if integers else np.float64
    try:
        with _open_text(path) as lines:
            table = np.loadtxt(lines, dtype, delimiter=delimiter, skiprows=header_lines, ndmin=2)
    except ValueError:
        table = None
    if table is not None and table.size == 0:  # no data lines: the caller's count says so
        return np.zeros((0, columns), dtype)
    if table is None or table.shape[1] != columns:
        parse = int if integers else float
        number, line = _first_bad_line(path, columns, delimiter, header_lines, parse)
        raise CorruptDataError(
            f"{path}, line {number}: expected {columns} {'integers' if integers else 'numbers'}, "
            f"found {line.strip()[:80]!r}."
        )
    return table


def _open_text(path):
    return (gzip.open if str(path).endswith(".gz") else open)(path, "rt", encoding="utf-8")


def _first_bad_line(path, columns, delimiter, header_lines, parse):
    """`(line number, line)` of the first data line that is not `columns` values `parse` reads."""
    number, line = 0, ""
    with _open_text(path) as lines:
        for number, line in enumerate(lines, start=1):
            fields = line.split(delimiter)
            if number > header_lines and line.strip() and not _parses(fields, columns, parse):
                return number, line
    return number, line


def _parses(fields, columns, parse):
    try:
        [parse(field) for field in fields]
    except ValueError:
        return False
    return len(fields) == columns


def whole_numbers(values, path, column, low, high, header_lines=0):
    """`values` read from a text file as int64, each a whole number in `[low, high]`.

    Args:
        values: float64 or int64 array whose rows are the data lines of the file.
        path: the file, for the error message.
        column: what the values are, for the error message.
        low, high: the range of valid values.
        header_lines: lines above the first value, to number the lines.

    Raises:
        CorruptDataError: naming the file, the line and the value of the
            first NaN, fraction or value out of range, which a plain cast
            would turn into a wrong integer.
    """
    bad = ~np.isfinite(values) | (values != np.round(values)) | (values < low) | (values > high)
    if bad.any():
        first = tuple(np.argwhere(bad)[0])  # (row,) or (row, column)
        raise CorruptDataError(
            f"{path}, line {header_lines + first[0] + 1}: {column} {values[first].item()} "
            f"is not a whole number in [{low}, {high}]."
        )
    return values.astype(np.int64)


def check_count(path, what, found, expected, install_hint):
    """Raises `CorruptDataError` unless the file held the `expected` number of `what`.

    Args:
        path: the file.
        what: what was counted, e.g. `"ratings"`.
        found, expected: the counts (ints, or tuples such as counts per class).
        install_hint: the command that puts a complete copy in place.
    """
    if found != expected:
        raise CorruptDataError(
            f"{path} holds {found} {what}, expected {expected}: the file is truncated or "
            f"not the release this loader knows. Put a complete copy in place with "
            f"`{install_hint}`."
        )
