"""Argument and input checks shared by every keras_attn layer.

Constructor checks return the value as a plain Python number, so numpy
scalars (`np.int64(2)`, `np.float32(0.1)`) are accepted and configs stay
JSON-serializable. Every error is a `ValueError` that names the argument and
ends with `Received: <name>=<value>`. Call-time checks compare static shapes;
`shape_checked_when_run` covers the sizes unknown when tracing.
"""

import math
import numbers

import keras
import numpy as np
from keras import ops


def check_int(name, value, minimum=1):
    """`value` as an `int` `>= minimum`; numpy integers are accepted, bools are not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")
    return int(value)


def check_optional_int(name, value, minimum=1):
    """`None`, or `value` checked by `check_int`."""
    return None if value is None else check_int(name, value, minimum)


def check_ints(name, value, size, minimum=1):
    """A tuple of `size` integers `>= minimum`."""
    try:
        items = tuple(value)
    except TypeError:
        items = ()
    if len(items) != size:
        raise ValueError(f"`{name}` must hold {size} integers. Received: {name}={value!r}")
    for item in items:
        if isinstance(item, bool) or not isinstance(item, numbers.Integral) or item < minimum:
            raise ValueError(
                f"`{name}` must hold integers >= {minimum}. Received: {name}={value!r}"
            )
    return tuple(int(item) for item in items)


def check_float(name, value, low=-math.inf, high=math.inf, low_open=False, high_open=False):
    """`value` as a finite `float` in the interval from `low` to `high`.

    `low_open`/`high_open` exclude the bound. Python and numpy reals are
    accepted; bools, strings and NaN are not.
    """
    ok = isinstance(value, numbers.Real) and not isinstance(value, bool)
    ok = ok and math.isfinite(value)
    ok = ok and (value > low if low_open else value >= low)
    ok = ok and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"`{name}` must be a number in {interval}. Received: {name}={value!r}")
    return float(value)


def check_positive(name, value):
    """A finite float `> 0` (an epsilon, a temperature, a ratio)."""
    return check_float(name, value, low=0.0, low_open=True)


def check_rate(name, value):
    """A dropout rate, a float in `[0, 1)`."""
    return check_float(name, value, 0.0, 1.0, high_open=True)


def check_choice(name, value, choices):
    """`value`, which must be one of `choices`."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"`{name}` must be one of {choices}. Received: {name}={value!r}")
    return value


def check_bool(name, value):
    """`value` as a `bool`; Python and numpy bools are accepted."""
    if not isinstance(value, bool) and type(value).__name__ != "bool_":
        raise ValueError(f"`{name}` must be a bool. Received: {name}={value!r}")
    return bool(value)


def check_shape(name, tensor, *expected):
    """Raises unless `tensor`'s static shape matches one of `expected`.

    Args:
        name: the call argument, used in the message.
        tensor: a tensor or array, or `None` (nothing is checked).
        *expected: tuples of ints and `None`s; `None` (or an axis of
            `tensor` unknown when tracing) matches any size.
    """
    if tensor is None:
        return
    shape = tuple(tensor.shape) if hasattr(tensor, "shape") else np.shape(tensor)
    if not any(_matches(shape, option) for option in expected):
        options = " or ".join(_describe(option) for option in expected)
        raise ValueError(f"`{name}` must have shape {options}. Received: {name}.shape={shape}")


def shape_checked_when_run(name, tensor, *expected):
    """`tensor`, made to fail when run unless its shape is the option of its rank.

    `check_shape` compares static sizes only. In a graph traced with unknown
    sizes (a `tf.function` whose input signature has `None` sizes) a mask
    of another size would be broadcast or sliced silently; this returns
    `tensor` reshaped to its own shape when its sizes equal `expected`'s,
    and to an empty shape otherwise, so that the graph raises when run, in
    an op of the name scope `<name>_shape_check`. With static sizes (eager
    calls, and JAX, which traces concrete shapes) `tensor` is returned as
    it is. Do not reshape the result: TensorFlow's graph optimizer merges
    consecutive reshapes, and the check with them.

    Args:
        name: the call argument, the name of the check's scope.
        tensor: a tensor or `None`, whose rank `check_shape` has checked.
        *expected: shapes of distinct ranks, of ints and scalar integer
            tensors (from `keras.ops.shape`).
    """
    if tensor is None:
        return None
    shape = next(option for option in expected if len(option) == len(tensor.shape))
    if None not in tuple(tensor.shape) and not any(ops.is_tensor(size) for size in shape):
        return tensor
    with keras.name_scope(f"{name}_shape_check"):
        sizes = ops.shape(tensor)
        equal = ops.all(ops.stack([ops.equal(s, e) for s, e in zip(sizes, shape, strict=True)]))
        # The first size times 0 when a size differs: a reshape that fails.
        return ops.reshape(tensor, (sizes[0] * ops.cast(equal, "int32"), *sizes[1:]))


def _matches(shape, expected):
    # Only static sizes are compared: an axis unknown when tracing (`None`,
    # a symbolic JAX dimension) matches anything.
    return len(shape) == len(expected) and all(
        static_size(s) is None or static_size(e) is None or int(s) == int(e)
        for s, e in zip(shape, expected, strict=True)
    )


def feature_spec(input_shape, any_rank=False):
    """An `InputSpec` that fixes the last axis (and the rank unless `any_rank`).

    Set in `build`, it makes Keras raise a `ValueError` naming the layer and
    both shapes when a built layer receives another feature size, instead of
    a backend error deep in a matrix product.
    """
    rank = {"min_ndim": 1} if any_rank else {"ndim": len(input_shape)}
    return keras.InputSpec(axes={-1: input_shape[-1]}, **rank)


def static_size(value):
    """`value` as an `int` if it is a static size, else `None`."""
    return int(value) if isinstance(value, numbers.Integral) else None


def _describe(expected):
    sizes = ", ".join("?" if e is None else str(int(e)) for e in expected)
    return f"({sizes},)" if len(expected) == 1 else f"({sizes})"


def renamed_config(config, renamed):
    """A copy of a layer config with retired argument names replaced.

    Lets a layer load a config saved before one of its arguments was renamed
    (an older `.keras` file): `renamed` maps each retired name to its new
    name. A config that holds both names is ambiguous and raises.
    """
    config = dict(config)
    for old, new in renamed.items():
        if old not in config:
            continue
        if new in config:
            raise ValueError(
                f"A config holds both `{old}` and its new name `{new}`. "
                f"Received: {old}={config[old]!r}, {new}={config[new]!r}"
            )
        config[new] = config.pop(old)
    return config
