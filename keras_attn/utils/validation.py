"""Argument and input checks shared by every keras_attn layer.

Constructor checks return the value as a plain Python number, so numpy
scalars (`np.int64(2)`, `np.float32(0.1)`) are accepted and configs stay
JSON-serializable. Every error is a `ValueError` that names the argument and
ends with `Received: <name>=<value>`. Call-time checks compare static shapes;
`shape_checked_when_run` covers the sizes unknown when tracing.

The command line's options are checked here too, by `argparse` `type`
functions (`int_option`, `float_option`, `output_folder`) that argparse calls
while it parses, before anything runs. Keras is imported inside the checks
that use it, so that the command line parses its options without importing
Keras (and a backend).
"""

import argparse
import functools
import inspect
import math
import numbers
import os
import pathlib
import tempfile
import warnings

import numpy as np


def check_int(name, value, minimum=1):
    """`value` as an `int` `>= minimum`; numpy integers are accepted, bools are not."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < minimum:
        raise ValueError(f"`{name}` must be an integer >= {minimum}. Received: {name}={value!r}")
    return int(value)


def check_last_positions(name, value, length):
    """`value`, a count of last positions: checked by `check_int`, at most `length` if known.

    `length` is a sequence length, an int, `None` or a dynamic size.
    """
    value = check_int(name, value)
    length = static_size(length)
    if length is not None and value > length:
        raise ValueError(
            f"`{name}` must be at most the length of the inputs ({length}). "
            f"Received: {name}={value}"
        )
    return value


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


def check_divisible(name, value, divisor_name, divisor):
    """`value`, which `divisor` must divide (a width split over heads)."""
    if value % divisor:
        raise ValueError(
            f"`{name}` must be divisible by `{divisor_name}={divisor}`. Received: {name}={value!r}"
        )
    return value


def check_heads(hidden_dim, num_heads):
    """`(hidden_dim, num_heads)` checked by `check_int`; the heads must divide the width."""
    num_heads = check_int("num_heads", num_heads)
    hidden_dim = check_int("hidden_dim", hidden_dim)
    return check_divisible("hidden_dim", hidden_dim, "num_heads", num_heads), num_heads


def check_image_shape(image_shape):
    """`image_shape`, `(height, width)` or `(height, width, channels)`, as a tuple of ints."""
    size = len(image_shape) if isinstance(image_shape, (tuple, list)) else 0
    if size not in (2, 3):
        raise ValueError(
            "`image_shape` must be (height, width) or (height, width, channels). "
            f"Received: image_shape={image_shape!r}"
        )
    return check_ints("image_shape", image_shape, size)


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
        interval = _interval(low, high, low_open, high_open)
        raise ValueError(f"`{name}` must be a number in {interval}. Received: {name}={value!r}")
    return float(value)


def _interval(low, high, low_open, high_open):
    return f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"


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
    if not isinstance(value, (bool, np.bool_)):
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
        raise ValueError(
            f"`{name}` must have shape {options}.{_symbolic_hint(shape)} "
            f"Received: {name}.shape={shape}"
        )


def check_length(name, length, limit_name, limit):
    """Raises if a static sequence `length` exceeds `limit`.

    Sequence lengths are static when tracing for XLA or `jit` (except an
    axis left unknown, which is not checked), so this check raises before
    anything is compiled.
    """
    length = static_size(length)
    if length is not None and length > limit:
        raise ValueError(
            f"The sequence length of `{name}` must be at most `{limit_name}={limit}`. "
            f"Received: {name}.shape[1]={length}"
        )


def checked_lookup(lookup, ids, size, name, table):
    """`lookup(ids)`, the rows of a table of `size` rows, for ids checked against it.

    Executed eagerly, ids outside `[0, size)` raise a `ValueError`. Traced
    for compilation (`jit_compile`, `jax.jit`, a `tf.function`, an export),
    the ids are not known yet and no check can raise (XLA drops asserts):
    every row of an example (an index of the first axis) that holds an id
    outside the table is NaN instead, so that every output computed from it
    is NaN, and the other examples are read as usual. An id is never
    answered with a row it does not name. The Keras mask that `lookup`
    attaches to its rows (`mask_zero`) is carried over.

    Args:
        lookup: function from int ids of `ids`' shape, all inside the
            table, to their rows `(*ids.shape, dim)`.
        ids: int tensor `(batch, ...)`.
        size: int, number of rows of the table.
        name: the ids' name, used in the message.
        table: the table's description, used in the message.

    Returns:
        `(*ids.shape, dim)` rows, NaN for the examples that hold an id
        outside the table.
    """
    from keras import ops

    # Keras has no public way to carry a Keras mask over to a new tensor
    # (KerasHub's `TokenAndPositionEmbedding` imports these too).
    from keras.src.backend import get_keras_mask, set_keras_mask

    _raise_if_outside(ids, size, name, table)
    inside = ops.logical_and(ops.greater_equal(ids, 0), ops.less(ids, size))  # ids' shape
    # An id outside reads the last row, not row 0, so that a `mask_zero` mask
    # keeps it visible; the rows of its example are replaced below.
    rows = lookup(ops.where(inside, ids, size - 1))  # (*ids.shape, dim)
    if len(inside.shape) > 1:
        inside = ops.all(inside, axis=tuple(range(1, len(inside.shape))), keepdims=True)
        # (batch, 1, ..., 1): whether each example holds only ids inside
    checked = ops.where(ops.expand_dims(inside, -1), rows, ops.cast(np.nan, rows.dtype))
    set_keras_mask(checked, get_keras_mask(rows))
    return checked


def _raise_if_outside(ids, size, name, table):
    from keras import ops

    if 0 in tuple(ids.shape):
        return
    bounds = concrete(ops.stack([ops.min(ids), ops.max(ids)]))
    low, high = (0, 0) if bounds is None else bounds
    if low < 0 or high >= size:
        label, value = ("min", low) if low < 0 else ("max", high)
        raise ValueError(
            f"`{name}` must hold ids from 0 to {size - 1}, the rows of {table}. "
            f"Received: {label}({name})={value}"
        )


def concrete(tensor):
    """`tensor` as a NumPy array, or `None` while it is traced for compilation."""
    import keras

    try:
        return keras.ops.convert_to_numpy(tensor)
    # A JAX tracer, a symbolic TF tensor, or a torch.export fake tensor
    # (".numpy() is not supported for tensor subclasses").
    except (TypeError, NotImplementedError, RuntimeError):
        return None


def check_rank(name, shape, *ranks):
    """Raises unless the shape `shape` of the call argument `name` has one of `ranks`."""
    if len(shape) not in ranks:
        options = " or ".join(str(rank) for rank in ranks)
        raise ValueError(
            f"`{name}` must have rank {options}. Received: {name}.shape={tuple(shape)}"
        )


def shape_checked_when_run(name, tensor, *expected):
    """`tensor`, made to fail when run unless its shape is the option of its rank.

    `check_shape` compares static sizes only. In a graph traced with unknown
    sizes (a `tf.function` whose input signature has `None` sizes) a mask
    of another size would be broadcast or sliced silently; this returns
    `tensor` reshaped to its own shape when its sizes equal `expected`'s,
    and to an empty shape otherwise, so that the graph raises when run, in
    an op of the name scope `<name>_shape_check`; on TensorFlow an assertion
    before the reshape raises first, with a message that names `name` and
    both shapes (XLA drops it). With static sizes (eager
    calls, and JAX, which traces concrete shapes) `tensor` is returned as
    it is. Do not reshape the result: TensorFlow's graph optimizer merges
    consecutive reshapes, and the check with them.

    Args:
        name: the call argument, the name of the check's scope.
        tensor: a tensor or `None`, whose rank `check_shape` has checked.
        *expected: shapes of distinct ranks, of ints and scalar integer
            tensors (from `keras.ops.shape`).
    """
    import keras

    if tensor is None:
        return None
    shape = next(option for option in expected if len(option) == len(tensor.shape))
    if None not in tuple(tensor.shape) and not any(keras.ops.is_tensor(size) for size in shape):
        return tensor
    with keras.name_scope(f"{name}_shape_check"):
        sizes = keras.ops.shape(tensor)
        equal = keras.ops.all(
            keras.ops.stack([keras.ops.equal(s, e) for s, e in zip(sizes, shape, strict=True)])
        )
        tensor = _asserted(equal, name, tensor, sizes, shape)
        # The first size times 0 when a size differs: a reshape that fails.
        return keras.ops.reshape(tensor, (sizes[0] * keras.ops.cast(equal, "int32"), *sizes[1:]))


def _asserted(equal, name, tensor, sizes, shape):
    """`tensor`, after an assertion that names `name`, its `sizes` and the `shape` expected.

    On TensorFlow, the graph's `InvalidArgumentError` then says what was
    expected and received; XLA drops assertions, so there the reshape after
    it fails instead.
    """
    import keras

    from keras_attn.kernels.runtime import assert_in_graph  # the kernels import utils

    # Plain strings and tensors: XLA has no string kernels (`tf.strings.format`
    # fails to compile), and drops the assertion with its constant inputs.
    def message():
        return [
            f"`{name}` must have shape",
            keras.ops.stack(shape),
            f"Received: {name}.shape=",
            sizes,
        ]

    return assert_in_graph(equal, message, tensor)


def _matches(shape, expected):
    return len(shape) == len(expected) and all(
        _same_size(s, e) for s, e in zip(shape, expected, strict=True)
    )


def _same_size(size, expected):
    import keras

    # An axis unknown when tracing (`None`) matches anything. Two symbolic
    # sizes (JAX's, when `model.export` traces a model) match when JAX can
    # tell they are equal; a symbolic size and a number are not compared.
    if size is None or expected is None or keras.ops.is_tensor(expected):
        return True
    if static_size(size) is not None and static_size(expected) is not None:
        return int(size) == int(expected)
    if _is_symbolic(size) and _is_symbolic(expected):
        return bool(size == expected)
    return True


def _is_symbolic(size):
    import keras

    return static_size(size) is None and not keras.ops.is_tensor(size)


def feature_spec(input_shape, any_rank=False):
    """An `InputSpec` that fixes the last axis (and the rank unless `any_rank`).

    Set in `build`, it makes Keras raise a `ValueError` naming the layer and
    both shapes when a built layer receives another feature size, instead of
    a backend error deep in a matrix product.
    """
    import keras

    rank = {"min_ndim": 1} if any_rank else {"ndim": len(input_shape)}
    return keras.InputSpec(axes={-1: input_shape[-1]}, **rank)


def static_size(value):
    """`value` as an `int` if it is a static size, else `None`."""
    return int(value) if isinstance(value, numbers.Integral) else None


def sequence_positions(length, dtype="int32"):
    """`ops.arange(0, length, dtype=dtype)`, also for a length known only when run.

    A static `length` is `ops.arange`. Any other (a tensor, a symbolic JAX
    dimension) is counted by a cumulative sum of ones of shape `(length,)`,
    whose axis keeps the length's own symbol: jax2onnx gives `arange` of a
    symbolic length a dimension of its own, which matches no input axis.
    """
    from keras import ops

    if isinstance(length, numbers.Integral):
        return ops.arange(0, length, dtype=dtype)
    return ops.cumsum(ops.ones((length,), dtype), axis=0) - ops.ones((), dtype)


def _symbolic_hint(shape):
    if not any(_is_symbolic(size) for size in shape if size is not None):
        return ""
    return (
        " On JAX, `model.export` gives every unknown axis of the inputs a symbol of its "
        "own: declare the sizes that are equal with "
        '`jax2tf_kwargs={"polymorphic_shapes": ...}`, e.g. [["(batch, length, 8)", '
        '"(batch, length)"]] for inputs `x` and `mask`.'
    )


def _describe(expected):
    sizes = ", ".join("?" if e is None else str(e) for e in expected)
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
                f"`{old}` is the former name of `{new}`; give only `{new}`. "
                f"Received: {old}={config[old]!r}, {new}={config[new]!r}"
            )
        config[new] = config.pop(old)
    return config


def renamed_arguments(**renamed):
    """Decorator: a function or constructor still takes its retired argument names.

    Each `old=new` pair lets callers pass `old`, with a `DeprecationWarning`,
    for one release after the rename; passing both names raises (as
    `renamed_config` does).

    Args:
        **renamed: `old_name="new_name"` pairs.

    Returns:
        The decorator.

    Example:

    >>> @renamed_arguments(max_length="max_sequence_length")
    ... def build(max_sequence_length=8):
    ...     return max_sequence_length
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     build(max_length=4)
    4
    """

    def decorate(function):
        @functools.wraps(function)
        def wrapper(*args, **kwargs):
            for old, new in renamed.items():
                if old in kwargs:
                    warnings.warn(
                        f"`{old}` is deprecated and will be removed in the next release; "
                        f"use `{new}`.",
                        DeprecationWarning,
                        stacklevel=2,
                    )
            return function(*args, **renamed_config(kwargs, renamed))

        # Keras reads a layer constructor's argument list without following
        # `__wrapped__`, so the wrapper states the signature it forwards to.
        wrapper.__signature__ = inspect.signature(function)
        return wrapper

    return decorate


def int_option(minimum=1, maximum=None):
    """An `argparse` `type` that reads an integer `>= minimum` (and `<= maximum`).

    argparse names the option before the message, so a bad value ends the
    parse with, for example, `argument --steps: must be an integer >= 1.
    Received: '0'`.

    Args:
        minimum: the smallest value accepted.
        maximum: the largest value accepted, or `None` for no bound.

    Returns:
        A function of the option's text that returns the `int`.

    Example:

    >>> int_option(1)("3")
    3
    """

    def parse(text):
        try:
            value = check_int("option", int(text), minimum)
        except ValueError:
            value = None
        if value is None or (maximum is not None and value > maximum):
            bounds = f">= {minimum}" if maximum is None else f"in [{minimum}, {maximum}]"
            raise argparse.ArgumentTypeError(f"must be an integer {bounds}. Received: {text!r}")
        return value

    return parse


def float_option(low=-math.inf, high=math.inf, low_open=False, high_open=False):
    """An `argparse` `type` that reads a finite number in the interval from `low` to `high`.

    Args:
        low: the lower bound.
        high: the upper bound.
        low_open: whether `low` itself is excluded.
        high_open: whether `high` itself is excluded.

    Returns:
        A function of the option's text that returns the `float`; NaN, an
        infinity or a value outside the interval ends the parse with a
        message that gives the interval and the text received.

    Example:

    >>> float_option(0.0, low_open=True)("1e-3")
    0.001
    """

    def parse(text):
        try:
            return check_float("option", float(text), low, high, low_open, high_open)
        except ValueError:
            interval = _interval(low, high, low_open, high_open)
            raise argparse.ArgumentTypeError(
                f"must be a number in {interval}. Received: {text!r}"
            ) from None

    return parse


def output_folder(text):
    """An `argparse` `type`: a folder that exists and is writable, or that can be created.

    The check writes an empty temporary folder in the folder (or, when it does
    not exist yet, in its nearest existing parent) and removes it, so it
    leaves nothing behind and creates nothing: the run creates the folder
    when it writes its results.

    Args:
        text: the option's text, a path.

    Returns:
        `text`, unchanged.
    """
    if not text:
        raise argparse.ArgumentTypeError(f"must be a folder. Received: {text!r}")
    folder = pathlib.Path(text).absolute()
    try:
        while not folder.exists():
            folder = folder.parent
        if folder.is_dir():
            os.rmdir(tempfile.mkdtemp(dir=folder))
    except OSError as error:
        raise argparse.ArgumentTypeError(
            f"cannot be written: {error}. Received: {text!r}"
        ) from None
    if not folder.is_dir():
        raise argparse.ArgumentTypeError(
            f"cannot be a folder: {folder} is a file. Received: {text!r}"
        )
    return text
