#!/usr/bin/env bash
# The tests at the lower bounds of the backend ranges (lower-bounds.txt), in a
# fresh virtual environment outside the repository:
#   bash scripts/test_lower_bounds.sh              TensorFlow and JAX
#   bash scripts/test_lower_bounds.sh --torch      also torch (on x86-64 the index's
#                                                  torch wheel pulls the CUDA libraries)
# TensorFlow runs the layer, model, initializer and pruning tests; JAX and torch
# run the backend-agnostic tests, as scripts/test.sh does.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${KERAS_ATTN_LOWER_VENV:-$(mktemp -d)/lower}"
extras="tensorflow-cpu,jax,reproduce"
[ "${1:-}" = "--torch" ] && extras="$extras,torch"
python -m venv "$venv"
"$venv/bin/pip" install -q --disable-pip-version-check -c lower-bounds.txt \
  ".[${extras}]" pytest pytest-xdist hypothesis
"$venv/bin/pip" list --format=freeze | grep -iE '^(keras|tensorflow.cpu|jax|jaxlib|torch)=='
run() {
  echo "=== lower bounds on the $1 backend ==="
  KERAS_BACKEND="$1" "$venv/bin/python" -m pytest -p no:cacheprovider -o addopts="" -q -n 2 \
    "${@:2}"
}
agnostic=(-m "backend_agnostic and not slow" tests --ignore=tests/deployment
  --ignore=tests/test_docs_reference.py)
failed=0
run tensorflow -m "not slow" tests/layers tests/models tests/initializers tests/pruning || failed=1
run jax "${agnostic[@]}" || failed=1
if [[ "$extras" == *torch* ]]; then run torch "${agnostic[@]}" || failed=1; fi
exit "$failed"
