#!/usr/bin/env bash
# The default test suite: everything on the TensorFlow backend, then every
# `backend_agnostic` test again on JAX and on torch, each run with its own count.
#   bash scripts/test.sh            all three backends
#   bash scripts/test.sh -k name    extra arguments go to every pytest run
set -uo pipefail
cd "$(dirname "$0")/.."
workers="${KERAS_ATTN_TEST_WORKERS:-2}"

run() {
  local backend="$1" workers="$2"
  shift 2
  echo "=== keras_attn tests on the $backend backend ==="
  KERAS_BACKEND="$backend" python -m pytest -n "$workers" "$@"
}

failed=0
run tensorflow "$workers" "$@" || failed=1
# JAX keys its persistent compilation cache on the compiled program itself, so
# a test that builds a program another test already compiled (Keras makes new
# jitted functions for each model) loads it instead of compiling it again. The
# folder is new for each run, shared by its workers, and removed at the end.
jax_cache="$(mktemp -d)"
trap 'rm -rf "$jax_cache"' EXIT
JAX_COMPILATION_CACHE_DIR="$jax_cache" JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS=0 \
  JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES=0 \
  run jax "$workers" -m "backend_agnostic and not slow" tests "$@" || failed=1
# torch runs eagerly (its tests compile with jit_compile=False) and in one
# process: its tests are short, and a second worker costs more to start
# (importing torch) than it saves.
run torch 0 -m "backend_agnostic and not slow" tests "$@" || failed=1
exit "$failed"
