"""A `keras.distribution.LayoutMap` that splits attention heads across devices."""

import keras

# Each key is a regex matched in full against a variable path, so it only
# looks at the names of the last sublayer: the core's `query`, `key`,
# `value` and `attention_output` projections (the same names and kernel
# layout as `keras.layers.MultiHeadAttention`) and the MLP names of
# `TransformerBlock` ("mlp_hidden"/"mlp_output", also in the BERT encoder's
# blocks) and `BSARecBlock` ("intermediate_dense"/"output_dense"). A name may
# carry a prefix ending in "_" or "/", such as "block_0_attention/" or
# "block_3_". The query, key and value projections are always sublayers of
# an attention layer, so their keys need a parent: a model's own top-level
# layer named "value" (a 2D Dense kernel) stays replicated.
_ANY = "(?:.*/)?"
_NESTED = ".+/"
_PREFIXED = "(?:.*[/_])?"
QKV_KERNEL = _NESTED + "(?:query|key|value)/kernel"
QKV_BIAS = _NESTED + "(?:query|key|value)/bias"
QK_KERNEL = _NESTED + "(?:query|key)/kernel"
V_KERNEL = _NESTED + "value/kernel"
OUTPUT_KERNEL = _ANY + "attention_output/kernel"
MLP_HIDDEN_KERNEL = _PREFIXED + "(?:mlp_hidden|intermediate_dense)/kernel"
MLP_HIDDEN_BIAS = _PREFIXED + "(?:mlp_hidden|intermediate_dense)/bias"
MLP_OUTPUT_KERNEL = _PREFIXED + "(?:mlp_output|output_dense)/kernel"


def head_parallel_layout_map(device_mesh, model_axis="model", convolutional=False):
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
    shares the attention names and layout. The number of heads and the MLP
    size must be divisible by the size of `model_axis`. Build the model
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
