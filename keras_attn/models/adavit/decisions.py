"""AdaViT's decisions: their keys, fixed decisions and random policies."""

import numpy as np
from keras import ops

DECISION_KEYS = ("patches", "heads", "attention", "mlp")
"""The kinds of AdaViT decisions: the keys of `AdaViT.decide`'s dict and of `AdaViT.usage`.

`AdaViT.decide` gives boolean `"patches"` `(batch, gated_blocks, patches)`,
`"heads"` `(batch, gated_blocks, heads)`, and `"attention"` and `"mlp"`
`(batch, gated_blocks)`, one per sub-layer; `True` keeps, `False` skips.
"""


def check_decision_kinds(decisions):
    """Raises a `ValueError` unless `decisions` has every key of `DECISION_KEYS`."""
    missing = [key for key in DECISION_KEYS if key not in decisions]
    if missing:
        raise ValueError(
            f"`decisions` must have the keys {DECISION_KEYS}. Received: decisions without {missing}"
        )


def fixed_gates(decisions, index, dtype):
    """The decisions of gated block `index`, as gate values of `dtype`."""
    return {key: ops.cast(decisions[key][:, index], dtype) for key in DECISION_KEYS}


def random_keep(shape, rate, rng):
    """Booleans of `shape` keeping `floor(rate·n)` or one more of the `n` along the last axis."""
    count = rate * shape[-1]
    kept = np.floor(count) + (rng.random(shape[:-1]) < count - np.floor(count))  # shape[:-1]
    ranks = np.argsort(rng.random(shape), axis=-1).argsort(axis=-1)  # a random order per row
    return ranks < kept[..., None]
