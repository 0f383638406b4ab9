#!/usr/bin/env bash
# The default test suite: everything on the TensorFlow backend, then every
# `backend_agnostic` test again on JAX and on torch, each run with its own count.
#   bash scripts/test.sh            all three backends
#   bash scripts/test.sh -k name    extra arguments go to every pytest run
set -uo pipefail
cd "$(dirname "$0")/.."
workers="${KERAS_ATTN_TEST_WORKERS:-2}"

run() {
  local backend="$1"
  shift
  echo "=== keras_attn tests on the $backend backend ==="
  KERAS_BACKEND="$backend" python -m pytest -n "$workers" "$@"
}

failed=0
run tensorflow "$@" || failed=1
run jax -m "backend_agnostic and not slow" tests "$@" || failed=1
# torch runs eagerly: its tests compile with jit_compile=False.
run torch -m "backend_agnostic and not slow" tests "$@" || failed=1
exit "$failed"
