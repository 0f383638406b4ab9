"""Argument checks and splitting shared by the data loaders (private)."""

import numbers

import numpy as np


def check_test_fraction(test_fraction):
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


def check_seed(seed):
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


def stratified_split(y, test_fraction, seed):
    """Deterministic stratified train/test split of sample indices.

    Every class contributes `round(count * test_fraction)` samples to the test
    split (at least one, and at least one left for training, when the class
    has two or more samples). Both index arrays come back shuffled, so that
    samples stored grouped by class are not grouped in the result.

    Args:
        y: 1D integer array of labels.
        test_fraction: float in (0, 1).
        seed: non-negative int seeding `numpy.random.default_rng`.

    Returns:
        Tuple `(train_indices, test_indices)` of int64 arrays.
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
    return train, test
