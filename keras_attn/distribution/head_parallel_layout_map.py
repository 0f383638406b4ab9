"""A `keras.distribution.LayoutMap` that splits attention heads across devices."""

import keras

from keras_attn.pruning.attention_layers import attention_layers

# Each key is a regex matched in full against a variable path, so it only
# looks at the names of the last sublayers: the core's `query`, `key`,
# `value` and `attention_output` projections (the same names and kernel
# layout as `keras.layers.MultiHeadAttention`) and the MLP names of
# `TransformerBlock` ("mlp_hidden"/"mlp_output", also in the BERT encoder's
# blocks) and `BSARecBlock` ("intermediate_dense"/"output_dense"). A name may
# carry a prefix ending in "_" or "/", such as "block_0_attention/" or
# "block_3_". The query, key and value keys also need their parent, the
# attention layer, to be named like one: "attention" or a name ending in
# "attention", with Keras' "_<n>" suffix ("block_0/attention/",
# "multi_head_attention_1/"). A user's own layer named "value", at the top
# or nested in a block of their own, stays replicated.
_ANY = "(?:.*/)?"
_ATTENTION = _ANY + "[^/]*attention(?:_[0-9]+)?/"
_PREFIXED = "(?:.*[/_])?"
QKV_KERNEL = _ATTENTION + "(?:query|key|value)/kernel"
QKV_BIAS = _ATTENTION + "(?:query|key|value)/bias"
QK_KERNEL = _ATTENTION + "(?:query|key)/kernel"
V_KERNEL = _ATTENTION + "value/kernel"
OUTPUT_KERNEL = _ANY + "attention_output/kernel"
MLP_HIDDEN_KERNEL = _PREFIXED + "(?:mlp_hidden|intermediate_dense)/kernel"
MLP_HIDDEN_BIAS = _PREFIXED + "(?:mlp_hidden|intermediate_dense)/bias"
MLP_OUTPUT_KERNEL = _PREFIXED + "(?:mlp_output|output_dense)/kernel"


def head_parallel_layout_map(
    device_mesh: keras.distribution.DeviceMesh,
    model_axis: str = "model",
    convolutional: bool = False,
) -> keras.distribution.LayoutMap:
    """Layout map that shards attention over heads and the MLP Megatron-style.

    With this map a `keras.distribution.ModelParallel` distribution keeps
    each head's query, key, value and output weights on one slice of the
    `model_axis` of the mesh, so every device computes the attention of its
    own heads; the MLP's first kernel is split by columns and its second by
    rows (Shoeybi et al., 2019). The math is unchanged, only where the
    weights live: a sharded model gives the outputs and gradients of the
    unsharded one, up to float rounding. Every other variable (embeddings,
    norms, task heads, output biases) is replicated.

    Layouts (`model` stands for `model_axis`):

    - query, key and value kernels `(dim, heads, head_dim)`:
      `(None, model, None)`; their biases `(heads, head_dim)`:
      `(model, None)`.
    - output kernel `(heads, head_dim, dim)`: `(model, None, None)`.
    - MLP hidden kernel `(dim, mlp)`: `(None, model)`; its bias:
      `(model,)`.
    - MLP output kernel `(mlp, dim)`: `(model, None)`.

    The keys match the sublayer names that `MultiHeadSelfAttention`,
    `TransformerBlock`, `BSARecBlock` and the library's models create,
    whatever the model or block is called; `keras.layers.MultiHeadAttention`
    shares the attention names and layout. The query, key and value keys
    match only inside a layer named "attention" or with a name ending in
    "attention" (as Keras' default "multi_head_attention_1"), so a user's
    own layer named "value" stays replicated. The number of heads and the
    MLP size must be divisible by the size of `model_axis`:
    `check_head_parallel` checks a model before it is sharded. Build the model
    inside the distribution's scope so that its variables are created
    sharded; the batch is split over the mesh's other axis.

    Args:
        device_mesh: `keras.distribution.DeviceMesh` with an axis named
            `model_axis` (and usually a batch axis, which may have size 1).
        model_axis: str, mesh axis the heads and the MLP are split over.
        convolutional: bool. `True` for models whose queries and keys come
            from causal convolutions (`ConvolutionalSelfAttention`,
            `LogSparseAttention`, `build_logsparse_forecaster`): their
            kernels are `(kernel_size, dim, heads, head_dim)` and get the
            layout `(None, None, model, None)`.

    Returns:
        `keras.distribution.LayoutMap` for `keras.distribution.ModelParallel`.

    Example:

    >>> devices = keras.distribution.list_devices()
    >>> mesh = keras.distribution.DeviceMesh(
    ...     (1, len(devices)), axis_names=("batch", "model"), devices=devices
    ... )
    >>> layout_map = head_parallel_layout_map(mesh)
    >>> layout_map["block_0/attention/query/kernel"].axes
    (None, 'model', None)
    >>> layout_map["block_0/mlp_output/kernel"].axes
    ('model', None)
    >>> print(layout_map["block_0/attention/attention_output/bias"])
    None

    To train, build and fit the model inside the distribution's scope (JAX):

    ```python
    distribution = keras.distribution.ModelParallel(
        layout_map=layout_map, batch_dim_name="batch"
    )
    with distribution.scope():
        model = keras_attn.models.build_vision_transformer((32, 32, 3), 10)
        model.compile(optimizer="adam", loss="sparse_categorical_crossentropy")
    model.fit(images, labels, batch_size=64)
    ```

    References:
        - [Shoeybi et al., 2019](https://arxiv.org/abs/1909.08053)
    """
    if not isinstance(device_mesh, keras.distribution.DeviceMesh):
        raise ValueError(
            "`device_mesh` must be a `keras.distribution.DeviceMesh`. "
            f"Received: device_mesh={device_mesh!r}"
        )
    if model_axis not in device_mesh.axis_names:
        raise ValueError(
            f"`model_axis` must be one of the mesh's axis names {device_mesh.axis_names}. "
            f"Received: model_axis={model_axis!r}"
        )
    layout_map = keras.distribution.LayoutMap(device_mesh)
    if convolutional:
        layout_map[QK_KERNEL] = (None, None, model_axis, None)
        layout_map[V_KERNEL] = (None, model_axis, None)
    else:
        layout_map[QKV_KERNEL] = (None, model_axis, None)
    layout_map[QKV_BIAS] = (model_axis, None)
    layout_map[OUTPUT_KERNEL] = (model_axis, None, None)
    layout_map[MLP_HIDDEN_KERNEL] = (None, model_axis)
    layout_map[MLP_HIDDEN_BIAS] = (model_axis,)
    layout_map[MLP_OUTPUT_KERNEL] = (model_axis, None)
    return layout_map


def check_head_parallel(
    model: keras.layers.Layer, layout_map: keras.distribution.LayoutMap
) -> None:
    """Checks, before any variable is sharded, that a layout map fits a model.

    Under `keras.distribution.ModelParallel` a model's variables are split
    when they are created, and JAX fails there, deep in the backend
    (`IndivisibleError`), when a split dimension is not divisible by the
    size of its mesh axis. This check raises a clear `ValueError` instead.
    Call it on the model built outside the distribution's scope (or on one
    of the same configuration), then build the model inside the scope. It
    checks that:

    - every attention layer (`MultiHeadSelfAttention`, its subclasses and
      `keras.layers.MultiHeadAttention`) has its query kernel split by the
      map: an attention layer whose name does not end in "attention" would
      silently stay replicated;
    - its `num_heads` is divisible by the size of the mesh axis its heads
      are split over;
    - every other variable the map splits, such as the MLP kernels, is
      divisible along each split axis.

    Args:
        model: a built Keras model or layer.
        layout_map: `keras.distribution.LayoutMap`, such as the one of
            `head_parallel_layout_map`.

    Example:

    >>> x = keras.Input((5, 8))
    >>> attention = keras.layers.MultiHeadAttention(3, 4, name="attention")
    >>> model = keras.Model(x, attention(x, x))
    >>> mesh = keras.distribution.DeviceMesh(
    ...     (1, 2), axis_names=("batch", "model"), devices=["cpu:0", "cpu:1"]
    ... )
    >>> check_head_parallel(model, head_parallel_layout_map(mesh))
    Traceback (most recent call last):
    ...
    ValueError: The heads of attention layer 'attention' ... Received: num_heads=3
    """
    if not isinstance(layout_map, keras.distribution.LayoutMap):
        raise ValueError(
            "`layout_map` must be a `keras.distribution.LayoutMap`. "
            f"Received: layout_map={layout_map!r}"
        )
    mesh = layout_map.device_mesh
    sizes = dict(zip(mesh.axis_names, mesh.shape, strict=True))
    for name, layer in attention_layers(model).items():
        if not layer.built:
            raise ValueError(
                "`model` must be built: call it on an input first. "
                f"Received: model with the unbuilt attention layer {name!r}"
            )
        query = next(v for v in layer.weights if v.path.endswith("query/kernel"))
        layout = layout_map[query.path]
        if layout is None:
            raise ValueError(
                f"The map does not split the heads of attention layer {name!r}: name it "
                "'attention' or a name ending in 'attention'. "
                f"Received: query kernel path={query.path!r}"
            )
        axis = next(axis for axis in layout.axes if axis is not None)
        if layer.num_heads % sizes[axis]:
            raise ValueError(
                f"The heads of attention layer {name!r} are split over mesh axis {axis!r} of "
                f"size {sizes[axis]}, so `num_heads` must be divisible by {sizes[axis]}. "
                f"Received: num_heads={layer.num_heads}"
            )
    for variable in model.weights:
        layout = layout_map[variable.path]
        if layout is None:
            continue
        for size, axis in zip(variable.shape, layout.axes, strict=False):
            if axis is not None and size % sizes[axis]:
                raise ValueError(
                    f"Variable {variable.path!r} is split over mesh axis {axis!r} of size "
                    f"{sizes[axis]}, so each split dimension must be divisible by "
                    f"{sizes[axis]}. Received: shape={tuple(variable.shape)}, "
                    f"layout={layout.axes}"
                )
