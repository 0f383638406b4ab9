#!/usr/bin/env bash
# The tests at the bounds of the backend ranges of setup.py, each in a fresh
# virtual environment outside the repository:
#   bash scripts/test_bounds.sh lower [BACKEND...]   the versions of lower-bounds.txt
#   bash scripts/test_bounds.sh upper [BACKEND...]   the newest releases the ranges admit
# BACKEND is tensorflow, jax or torch (default: all three; on x86-64 the index's
# torch wheel brings the CUDA libraries, several GB). TensorFlow runs the layer,
# model, initializer and pruning tests; JAX and torch run the backend-agnostic
# tests, as scripts/test.sh does. KERAS_ATTN_TEST_WORKERS sets pytest's workers (2).
set -euo pipefail
cd "$(dirname "$0")/.."
bound="${1:-}"
case "$bound" in
  lower) pins=(-c lower-bounds.txt) ;;
  upper) pins=(--upgrade) ;;
  *) echo "Usage: bash scripts/test_bounds.sh lower|upper [tensorflow] [jax] [torch]" >&2; exit 2 ;;
esac
shift
backends=("$@")
[ "${#backends[@]}" -eq 0 ] && backends=(tensorflow jax torch)
extras="reproduce"
for backend in "${backends[@]}"; do
  case "$backend" in
    tensorflow) extras="$extras,tensorflow-cpu" ;;
    jax | torch) extras="$extras,$backend" ;;
    *) echo "Unknown backend: $backend (tensorflow, jax or torch)" >&2; exit 2 ;;
  esac
done
# Export needs TensorFlow on every backend, and the suite exports.
[[ "$extras" == *tensorflow-cpu* ]] || extras="$extras,tensorflow-cpu"
venv="${KERAS_ATTN_BOUNDS_VENV:-$(mktemp -d)/$bound}"
python -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check "${pins[@]}" \
  ".[${extras}]" pytest pytest-xdist hypothesis
echo "=== $bound bounds ==="
"$venv/bin/pip" list --format=freeze | grep -iE '^(keras|numpy|tensorflow.cpu|jax|jaxlib|torch)=='
workers="${KERAS_ATTN_TEST_WORKERS:-2}"
run() {
  echo "=== $bound bounds on the $1 backend ==="
  KERAS_BACKEND="$1" "$venv/bin/python" -m pytest -p no:cacheprovider -o addopts="" -q \
    -n "$workers" "${@:2}"
}
agnostic=(-m "backend_agnostic and not slow" tests --ignore=tests/deployment
  --ignore=tests/test_docs_reference.py)
failed=0
for backend in "${backends[@]}"; do
  if [ "$backend" = tensorflow ]; then
    run tensorflow -m "not slow" tests/layers tests/models tests/initializers tests/pruning ||
      failed=1
  else
    run "$backend" "${agnostic[@]}" || failed=1
  fi
done
exit "$failed"
