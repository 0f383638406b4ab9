"""The exact-model cross-entropy script: the paper's values, at a tiny size."""

import math

import keras
import pytest


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_cross_entropy_against_length_has_the_papers_shape(load_benchmark):
    measured = load_benchmark("exact_cross_entropy").measure([4, 64], strings=8)
    # Each row is found by the epsilon its builder arguments record (none without layer norm).
    rows = {(row["task"], row["arguments"].get("layer_norm_epsilon")): row for row in measured}
    assert len(rows) == 6
    for row in rows.values():
        assert row["accuracy"] == [1.0, 1.0]
    # Layer norm, epsilon 0: -log2 sigmoid(sqrt(10)) for PARITY, sqrt(6) for FIRST, at every n.
    for task, logit in (("parity", math.sqrt(10)), ("first", math.sqrt(6))):
        expected = math.log2(1 + math.exp(-logit))
        bits = rows[(task, 0.0)]["bits"]
        assert bits == pytest.approx([expected] * 2, abs=1e-4)
        # Without layer norm, and with the default epsilon 1e-5, it grows towards 1 bit.
        for epsilon in (None, 1e-5):
            short, long = rows[(task, epsilon)]["bits"]
            assert short < long <= 1.0 + 1e-6
