"""The TensorFlow implementations of the attention kernels and of `runtime`.

Imported on the TensorFlow backend only (see `_shared.backend_module`), and
where TensorFlow serves a SavedModel (`runtime.load_saved_model`).
TensorFlow has no fused attention of its own: its dense kernel is
`keras.ops.dot_product_attention`, compiled by XLA, as in
`keras.layers.MultiHeadAttention`.
"""

import tensorflow as tf
from keras import ops

from keras_attn.kernels._shared import causal_mask


def tracing():
    """Never: `keras.ops` traces in every graph."""
    return False


def dense_attention(query, key, value, mask, *, scale, causal):
    """`keras.ops.dot_product_attention` of `(batch, length, heads, dim)` tensors.

    The causal mask is passed as a mask: with `is_causal=True` Keras adds
    axes to its boolean mask by indexing (`mask[None, None]`), a strided
    slice that the LiteRT converter keeps as a TensorFlow op (Flex).
    """
    if causal:
        visible = causal_mask(ops.shape(query)[1], ops.shape(key)[1])  # (queries, length)
        mask = visible if mask is None else ops.logical_and(mask, visible)
    return ops.dot_product_attention(query, key, value, mask=mask, scale=scale)


NATIVE = {"dense_attention": dense_attention}


def gradients(loss, inputs):
    """`runtime.gradients` with a `GradientTape`."""
    with tf.GradientTape() as tape:
        tape.watch(inputs)
        total, aux = loss(*inputs)
    return tape.gradient(total, inputs, unconnected_gradients=tf.UnconnectedGradients.ZERO), aux


def assert_in_graph(condition, message, tensor):
    """`runtime.assert_in_graph`: the graph's `InvalidArgumentError` says `message()`."""
    with tf.control_dependencies([tf.debugging.Assert(condition, message())]):
        return tf.identity(tensor)


def dropout(inputs, rate, seed_generator):
    """`runtime.dropout`: Keras' TensorFlow dropout with `rng_alg="philox"`.

    Keras draws with `auto_select`, which computes the key and counter of
    the seed in `StatelessRandomGetKeyCounter`. XLA on CPU expands a random
    draw into a called computation, and inlines it where it is the only
    draw of its shape; the key computation is then fused into the loop
    over the numbers and recomputed for each. With Philox named, the key
    and counter come from the seed before the draw. The numbers are the
    same: `auto_select` is Philox here.
    """
    seed = seed_generator.next()  # (2,) int64: TensorFlow's draws take int32 seeds
    if seed.dtype != tf.int32:  # as Keras casts it
        seed = tf.cast(tf.math.floormod(seed, tf.int32.max - 1), tf.int32)
    return tf.nn.experimental.stateless_dropout(inputs, rate=rate, seed=seed, rng_alg="philox")


def graph_function(function, **options):
    """`runtime.graph_function`: a `tf.function`."""
    return tf.function(function, **options)


def xla_compiled(function):
    """`runtime.xla_compiled`: a `tf.function` compiled by XLA."""
    return tf.function(function, jit_compile=True)


def use_one_thread():
    """`runtime.use_one_thread`: one intra-op and one inter-op thread."""
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)


def ordered_dataset(x, y, batch_size):
    """`runtime.ordered_dataset`."""
    options = tf.data.Options()
    options.autotune.enabled = False
    dataset = tf.data.Dataset.from_tensor_slices((x, y)).batch(batch_size)
    return dataset.with_options(options)


def training_step_hlo(model, loss, x, y):
    """`runtime.training_step_hlo`: the HLO of a `tf.function` with `jit_compile=True`."""

    def step(x, y):
        with tf.GradientTape() as tape:
            total = loss(y, model(x, training=True))
        return total, tape.gradient(total, model.trainable_variables)

    compiled = tf.function(step, jit_compile=True)
    return compiled.experimental_get_compiler_ir(x, y)(stage="hlo")


def load_saved_model(path):
    """`runtime.load_saved_model`."""
    return tf.saved_model.load(path)
