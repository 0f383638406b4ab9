"""Data- and head-parallel equality checks on 2 virtual CPU devices (JAX).

Run in a fresh interpreter (the device count is fixed when JAX starts):

    PYTHONPATH=. python tests/distribution/jax_scenarios.py [data_parallel] [head_parallel]

Prints one line `RESULT {...}` with, per scenario, the largest absolute
difference between the distributed and the single-device run and the
sharding found on the variables. The tests and
`benchmarks/distribution_equality.py` read that line.
"""

import json
import os
import sys

# The caller's XLA flags are kept, so both runs of a comparison compile alike:
# the tests pass on the suite's fast-compile flags (`conftest.py`), the
# benchmark runs at XLA's defaults.
os.environ["KERAS_BACKEND"] = "jax"
os.environ["XLA_FLAGS"] = " ".join(
    [os.environ.get("XLA_FLAGS", ""), "--xla_force_host_platform_device_count=2"]
).strip()

import doctest  # noqa: E402

import jax  # noqa: E402
import keras  # noqa: E402
import numpy as np  # noqa: E402

from keras_attn.distribution import head_parallel_layout_map  # noqa: E402
from keras_attn.losses import GaussianNegativeLogLikelihood  # noqa: E402
from keras_attn.models import (  # noqa: E402
    build_bert_encoder,
    build_bsarec,
    build_logsparse_forecaster,
    build_vision_transformer,
)

GLOBAL_BATCH = 8
STEPS = 3
# Every scenario's model: one block of 2 heads of width 8.
SIZE = {"hidden_dim": 8, "num_layers": 1, "num_heads": 2}


def forecaster():
    rng = np.random.default_rng(0)  # the same data on every call
    model = build_logsparse_forecaster(12, dropout=0.0, local_window=3, kernel_size=3, **SIZE)
    inputs = {
        "lagged_target": rng.normal(size=(GLOBAL_BATCH, 12, 1)).astype("float32"),
        "hour_of_day": rng.integers(0, 24, size=(GLOBAL_BATCH, 12)).astype("int32"),
        "day_of_week": rng.integers(0, 7, size=(GLOBAL_BATCH, 12)).astype("int32"),
    }
    targets = inputs["lagged_target"][..., 0] * 0.5 + 1.0
    return model, inputs, targets, GaussianNegativeLogLikelihood()


def vit():
    rng = np.random.default_rng(0)  # the same data on every call
    model = build_vision_transformer((8, 8, 1), 3, patch_size=4, **SIZE)
    images = rng.normal(size=(GLOBAL_BATCH, 8, 8, 1)).astype("float32")
    labels = rng.integers(0, 3, size=(GLOBAL_BATCH,)).astype("int32")
    return model, images, labels, "sparse_categorical_crossentropy"


def bert():
    rng = np.random.default_rng(0)  # the same data on every call
    model = build_bert_encoder(50, intermediate_dim=16, max_sequence_length=6, **SIZE)
    padding = np.ones((GLOBAL_BATCH, 6), "int32")
    padding[:, 4:] = 0
    inputs = {
        "token_ids": rng.integers(1, 50, size=(GLOBAL_BATCH, 6)).astype("int32") * padding,
        "padding_mask": padding,
        "segment_ids": np.zeros((GLOBAL_BATCH, 6), "int32"),
    }
    return model, inputs, None, None


def bsarec():
    rng = np.random.default_rng(0)  # the same data on every call
    model = build_bsarec(20, max_sequence_length=6, dropout=0.0, attention_dropout=0.0, **SIZE)
    items = rng.integers(0, 21, size=(GLOBAL_BATCH, 6)).astype("int32")
    return model, items, None, None


def build(make, weights, distribution=None):
    """The scenario's model, created (inside `distribution`'s scope) with `weights`."""
    keras.utils.set_random_seed(0)
    model, *data = make()
    model.set_weights(weights)
    return model, *data


def max_difference(first, second):
    leaves = zip(jax.tree_util.tree_leaves(first), jax.tree_util.tree_leaves(second), strict=True)
    return max(float(np.max(np.abs(np.asarray(a) - np.asarray(b)))) for a, b in leaves)


# The Gaussian likelihood's gradient grows as 1 / scale^2: with seed 0's
# initial scales, SGD at 0.05 diverges on the forecaster.
LEARNING_RATES = {"forecaster": 1e-3}


def fit_steps(model, inputs, targets, loss, learning_rate=0.05):
    model.compile(optimizer=keras.optimizers.SGD(learning_rate), loss=loss)
    losses = [float(model.train_on_batch(inputs, targets)) for _ in range(STEPS)]
    return losses, [np.asarray(w) for w in model.get_weights()]


def data_parallel(make):
    keras.utils.set_random_seed(0)
    weights = make()[0].get_weights()
    learning_rate = LEARNING_RATES.get(make.__name__, 0.05)
    single = fit_steps(*build(make, weights), learning_rate)
    distribution = keras.distribution.DataParallel(devices=keras.distribution.list_devices())
    with distribution.scope():
        model, inputs, targets, loss = build(make, weights)
        parallel = fit_steps(model, inputs, targets, loss, learning_rate)
    replicated = all(
        v.value.sharding.is_fully_replicated and len(v.value.sharding.device_set) == 2
        for v in model.weights
    )
    return {
        "single_device_losses": single[0],
        "data_parallel_losses": parallel[0],
        "loss_max_abs_difference": max_difference(single[0], parallel[0]),
        "weight_max_abs_difference": max_difference(single[1], parallel[1]),
        "weights_replicated_on_2_devices": replicated,
        "losses_decrease": parallel[0][-1] < parallel[0][0],
    }


def outputs_and_gradients(model, inputs):
    """Model outputs and the gradients of `sum(sin(outputs))` for every trainable weight."""
    trainable = [v.value for v in model.trainable_variables]
    non_trainable = [v.value for v in model.non_trainable_variables]

    def objective(trainable):
        outputs, _ = model.stateless_call(trainable, non_trainable, inputs)
        total = sum(
            jax.numpy.sum(jax.numpy.sin(leaf)) for leaf in jax.tree_util.tree_leaves(outputs)
        )
        return total, outputs

    (_, outputs), gradients = jax.jit(jax.value_and_grad(objective, has_aux=True))(trainable)
    return outputs, gradients


HIDDEN = ("mlp_hidden", "intermediate_dense")
SECOND = ("mlp_output", "output_dense")


def split_axis(path, rank):
    """Axis the head-parallel layout must split, or `None` for a replicated variable."""
    layer, name = path.split("/")[-2:]
    if name != "kernel":
        return None
    if layer in ("query", "key", "value"):
        return rank - 2  # the heads axis of (..., dim, heads, head_dim)
    if layer == "attention_output":
        return 0  # (heads, head_dim, dim)
    if layer.endswith(HIDDEN):
        return 1  # (dim, mlp): columns
    if layer.endswith(SECOND):
        return 0  # (mlp, dim): rows
    return None


def sharding_report(model):
    """Per expected-sharded kernel: its layout spec and the shapes of the two shards."""
    report = {}
    for variable in model.weights:
        axis = split_axis(variable.path, len(variable.shape))
        if axis is None:
            continue
        value = variable.value
        shards = value.addressable_shards
        report[variable.path] = {
            "shape": list(variable.shape),
            "spec": [str(entry) for entry in value.sharding.spec],
            "shard_shapes": [list(shard.data.shape) for shard in shards],
            "split": (
                len({shard.device for shard in shards}) == 2
                and all(s.data.shape[axis] * 2 == variable.shape[axis] for s in shards)
                and len({str(shard.index) for shard in shards}) == 2
            ),
        }
    return report


def assert_really_sharded(model):
    report = sharding_report(model)
    unsplit = [path for path, entry in report.items() if not entry["split"]]
    assert report and not unsplit, f"kernels not split over the 2 devices: {unsplit}"
    return report


def head_parallel_distribution(convolutional=False, layout_map=None):
    """`ModelParallel` over a (batch 1, model 2) mesh with the library's layout map."""
    devices = keras.distribution.list_devices()
    mesh = keras.distribution.DeviceMesh((1, 2), axis_names=("batch", "model"), devices=devices)
    if layout_map is None:
        layout_map = head_parallel_layout_map(mesh, convolutional=convolutional)
    else:
        layout_map = layout_map(mesh)
    return keras.distribution.ModelParallel(layout_map=layout_map, batch_dim_name="batch")


def head_parallel(make):
    keras.utils.set_random_seed(0)
    weights = make()[0].get_weights()
    model, inputs, _, _ = build(make, weights)
    reference = outputs_and_gradients(model, inputs)
    with head_parallel_distribution().scope():
        model, inputs, _, _ = build(make, weights)
        sharded = outputs_and_gradients(model, inputs)
    return {
        "output_max_abs": max_difference(
            reference[0], jax.tree_util.tree_map(np.zeros_like, reference[0])
        ),
        "output_max_abs_difference": max_difference(reference[0], sharded[0]),
        "gradient_max_abs": max_difference(
            reference[1], jax.tree_util.tree_map(np.zeros_like, reference[1])
        ),
        "gradient_max_abs_difference": max_difference(reference[1], sharded[1]),
        **sharding_result(model),
    }


def sharding_only(make, **distribution_kwargs):
    """Builds the model under the distribution and reports its sharding, without running it."""
    with head_parallel_distribution(**distribution_kwargs).scope():
        model = make()[0]
    return sharding_result(model)


def sharding_result(model):
    try:
        return {"sharded_kernels": assert_really_sharded(model), "not_sharded_error": None}
    except AssertionError as error:
        return {"sharded_kernels": sharding_report(model), "not_sharded_error": str(error)}


def docstring_example():
    """Runs the `>>>` examples of `head_parallel_layout_map`'s docstring."""
    runner = doctest.DocTestRunner()
    globs = {"keras": keras, "head_parallel_layout_map": head_parallel_layout_map}
    for test in doctest.DocTestFinder().find(head_parallel_layout_map, globs=globs):
        runner.run(test)
    return {"failures": runner.failures, "examples": runner.tries}


def data_parallel_scenarios():
    return {"logsparse_forecaster": data_parallel(forecaster), "vit": data_parallel(vit)}


def head_parallel_scenarios():
    return {
        "bert_encoder": head_parallel(bert),
        "vit": head_parallel(vit),
        "bsarec": head_parallel(bsarec),
        "logsparse_forecaster": sharding_only(forecaster, convolutional=True),
        "vit_empty_layout_map": sharding_only(vit, layout_map=keras.distribution.LayoutMap),
        "docstring_example": docstring_example(),
    }


SCENARIOS = {"data_parallel": data_parallel_scenarios, "head_parallel": head_parallel_scenarios}


def main():
    assert len(keras.distribution.list_devices()) == 2
    names = [name for name in sys.argv[1:] if name in SCENARIOS] or list(SCENARIOS)
    results = {"devices": keras.distribution.list_devices(), "xla_flags": os.environ["XLA_FLAGS"]}
    results.update({name: SCENARIOS[name]() for name in names})
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main()
