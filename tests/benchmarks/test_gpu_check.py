"""The GPU check script runs, and catches a wrong layer, at a tiny size on the CPU."""

import argparse

import keras
import numpy as np
import pytest


def _smoke_args():
    return argparse.Namespace(
        cpu_smoke=True, check_length=24, dim=16, heads=2, lengths=[32], core_length=32, repeats=1
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
    rates = gpu_check.throughput(backend, "float32", _smoke_args())
    assert [row["length"] for row in rates] == [32, 32]
    assert all(v > 0 for row in rates for v in row["steps_per_second"].values())
    assert "dense causal core" in rates[1]["steps_per_second"]  # LogSparse's fused baseline


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
