"""Skips the tests that read a data set when it is not installed."""

import pytest

from keras_attn.datasets import DatasetNotFoundError


def needs_data(find, source):
    """A mark that skips a test unless `find()` finds the data set.

    `find` may raise `DatasetNotFoundError`; `source` is what
    `python -m keras_attn.datasets.fetch` downloads.
    """
    try:
        found = find()
    except DatasetNotFoundError:
        found = False
    reason = f"needs `python -m keras_attn.datasets.fetch {source}`"
    return pytest.mark.skipif(not found, reason=reason)
