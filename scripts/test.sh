#!/usr/bin/env bash
# The default test suite: everything on the TensorFlow backend, then every
# `backend_agnostic` test again on JAX and on torch, each run with its own count.
#   bash scripts/test.sh            all three backends
#   bash scripts/test.sh -k name    extra arguments go to every pytest run
set -uo pipefail
cd "$(dirname "$0")/.."
workers="${KERAS_ATTN_TEST_WORKERS:-2}"
TORCH_TESTS="contract or robustness or properties or layer_checks"

run() {
  local backend="$1"
  shift
  echo "=== keras_attn tests on the $backend backend ==="
  KERAS_BACKEND="$backend" python -m pytest -n "$workers" "$@"
}

failed=0
run tensorflow "$@" || failed=1
run jax -m "backend_agnostic and not slow" tests "$@" || failed=1
# torch (eager, jit_compile=False): the layer contracts, robustness, property
# and contract self-tests; the other backend_agnostic tests still read torch
# tensors that require grad with numpy directly.
run torch -m "backend_agnostic and not slow" -k "$TORCH_TESTS" tests/layers "$@" || failed=1
exit "$failed"
