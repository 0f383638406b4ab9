"""The GPU check script runs, and catches a wrong layer, at a tiny size on the CPU."""

import argparse

import keras
import numpy as np
import pytest


def _smoke_args():
    return argparse.Namespace(
        cpu_smoke=True, check_length=24, dim=16, heads=2, lengths=[32], core_lengths=[32], repeats=1
    )


@pytest.mark.skipif(
    keras.backend.backend() == "jax", reason="XLA is covered on TF; JAX compiles slowly here."
)
def test_gpu_check_compares_every_layer_and_measures_throughput(load_benchmark):
    gpu_check = load_benchmark("gpu_check")
    backend = keras.backend.backend()
    rows = gpu_check.check_outputs(backend, "float32", _smoke_args())
    names = [name for name, _, _ in gpu_check.layer_configs(True)]
    assert [row["layer"] for row in rows] == names
    assert all(row["ok"] and row["relative_error"] < 1e-5 for row in rows)
    rates = gpu_check.throughput(backend, _smoke_args(), deadline=float("inf"))
    assert [row["length"] for row in rates] == [32, 32]
    assert all(v > 0 for row in rates for v in row["steps_per_second"].values())
    logsparse = rates[1]["steps_per_second"]
    assert list(logsparse)[:2] == ["LogSparse", "dense causal core"]  # its fastest baseline next
    skipped = gpu_check.throughput(backend, _smoke_args(), deadline=0.0)
    assert {v for row in skipped for v in row["steps_per_second"].values()} == {
        "skipped: time budget"
    }


def test_gpu_check_compares_each_native_kernel_with_its_reference(load_benchmark):
    from keras_attn import kernels

    gpu_check = load_benchmark("gpu_check")
    rows = gpu_check.check_kernels(keras.backend.backend(), _smoke_args())
    checked = {row["kernel"] for row in rows}
    assert checked == {k for k in kernels.NATIVE_KERNELS if kernels.has_native(k)}
    assert all(row["ok"] for row in rows)
    assert [row["dtype"] for row in rows][:2] == ["float32", "bfloat16"]


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_gpu_check_flags_a_layer_that_differs_from_the_cpu(monkeypatch, load_benchmark):
    gpu_check = load_benchmark("gpu_check")
    compiled = gpu_check._compiled

    def broken(backend, layer, training_step=False):
        step = compiled(backend, layer, training_step)
        return lambda x: step(x) * (1.0 + 1e-3)  # a 0.1% error on the "device"

    monkeypatch.setattr(gpu_check, "_compiled", broken)
    rows = gpu_check.check_outputs("tensorflow", "float32", _smoke_args())
    assert not any(row["ok"] for row in rows)
    assert np.all([row["relative_error"] > 5e-4 for row in rows])
    assert not gpu_check._all_match([{"dtypes": {"float32": {"outputs": rows}}}])
    kernel_failure = {"kernels": [{"kernel": "dense_attention", "ok": False}]}
    assert not gpu_check._all_match([kernel_failure])


@pytest.mark.skipif(keras.backend.backend() != "tensorflow", reason="One backend is enough.")
def test_gpu_check_times_the_pruned_encoder(load_benchmark):
    gpu_check = load_benchmark("gpu_check")
    result = gpu_check.pruned_encoder_throughput(_smoke_args())
    assert sorted(result) == ["1", "64"]
    for batch in result.values():
        assert batch["unpruned"] > 0 and batch["ratio"] == batch["half pruned"] / batch["unpruned"]
