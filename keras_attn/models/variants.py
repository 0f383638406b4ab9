"""The sizes of registered model variants and the per-block drop-path schedule.

Shared by the ViT-family builders (`build_vision_transformer`, `build_t2t_vit`).
"""

from keras_attn.utils.validation import check_rate


def variant_sizes(variants, variant, **given):
    """The sizes of a registered variant, overridden by the sizes that are given.

    Args:
        variants: dict `variant name -> dict of sizes`, a registry such as
            `VIT_VARIANTS` or `T2T_VIT_VARIANTS`.
        variant: a key of `variants`, or `None` for no registered sizes.
        **given: sizes passed by the caller; those that are `None` keep the
            variant's.

    Returns:
        A new dict of sizes.

    Example:

    >>> variants = {"small": {"hidden_dim": 384, "num_layers": 12}}
    >>> variant_sizes(variants, "small", num_layers=6, hidden_dim=None)
    {'hidden_dim': 384, 'num_layers': 6}
    """
    if variant is not None and variant not in variants:
        raise ValueError(
            f"`variant` must be one of {sorted(variants)} or None. Received: variant={variant!r}"
        )
    sizes = dict(variants.get(variant, {}))
    sizes.update({name: value for name, value in given.items() if value is not None})
    return sizes


def drop_path_rates(drop_path_rate, num_layers):
    """Per-block drop-path rates rising linearly from 0 to `drop_path_rate`.

    The stochastic-depth schedule of the official ViT-family code (and timm):
    block `i` of `num_layers` gets `drop_path_rate * i / (num_layers - 1)`, so the
    first block is never dropped and the last at the full rate.

    Args:
        drop_path_rate: float in `[0, 1)`, the rate of the last block.
        num_layers: int, number of blocks.

    Returns:
        A list of `num_layers` floats.

    Example:

    >>> drop_path_rates(0.1, 3)
    [0.0, 0.05, 0.1]
    """
    drop_path_rate = check_rate("drop_path_rate", drop_path_rate)
    if num_layers == 1:
        return [0.0]
    return [drop_path_rate * index / (num_layers - 1) for index in range(num_layers)]
