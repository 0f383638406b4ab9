"""Writing results as JSON plus a PNG plot, and the small-run switch."""

import contextlib
import json
import os
import pathlib
import platform
import subprocess
import sys
import time
import warnings
from typing import TYPE_CHECKING, Any, Literal

if TYPE_CHECKING:
    import matplotlib.figure

SMALL_RUN_VARIABLE = "KERAS_ATTN_SMALL"
SMOKE_TEST_NOTICE = (
    "This run used the fast setting: its numbers are a smoke test that the code runs end to "
    "end, not the paper's result. Run with --full for the documented setting."
)


def is_small_run() -> bool:
    """True when `KERAS_ATTN_SMALL` is set to a non-empty value other than "0".

    Notebooks and reproductions shrink their data and epochs when it is set;
    the test suite sets it so that they run in seconds.
    """
    return os.environ.get(SMALL_RUN_VARIABLE, "") not in ("", "0")


def run_metadata(
    started_at: float,
    setting: Literal["fast", "full", "benchmark"],
    written: str | os.PathLike | None = None,
) -> dict[str, Any]:
    """Describes the run that produced a result, for its JSON file.

    Args:
        started_at: `time.time()` when the run began; the wall time is
            measured from it to this call.
        setting: `"fast"` (a smoke test, not a paper's result), `"full"`
            (the documented full-size setting) or `"benchmark"`.
        written: optional path of the result file the run writes, perhaps
            for the second time: a change to it alone does not mark the
            commit as changed.

    Returns:
        dict with the command line, the git commit (with `"+changes"` when
        the work tree differs from it), the wall time in seconds, the load
        average at the end of the run, the CPU count and model, the date and
        the setting.
    """
    if setting not in ("fast", "full", "benchmark"):
        raise ValueError(
            f"`setting` must be 'fast', 'full' or 'benchmark'. Received: setting={setting!r}"
        )
    return {
        "command": _command_line(),
        "commit": _git_commit(written),
        "wall_time_s": round(time.time() - started_at, 1),
        "load_average": [round(value, 2) for value in os.getloadavg()],
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "processor": processor_name(),
        "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "setting": setting,
    }


def processor_name() -> str:
    """The CPU's model name (Linux: `/proc/cpuinfo`), else what `platform` knows."""
    with contextlib.suppress(OSError):
        for line in pathlib.Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or "unknown"


def _command_line():
    """`sys.argv` as typed; `python -m package` when run as a module."""
    program = pathlib.Path(sys.argv[0])
    if program.name == "__main__.py":
        return " ".join(["python", "-m", program.parent.name, *sys.argv[1:]])
    return " ".join([program.name, *sys.argv[1:]])


def _git_commit(written=None, root=None):
    """HEAD's commit, with `"+changes"` when a tracked file other than `written` differs."""
    root = pathlib.Path(root or pathlib.Path(__file__).resolve().parents[2])
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, check=True
        ).stdout.strip()
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "-z"],
            cwd=root,
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return "unknown"
    own = pathlib.Path(written).resolve() if written else None
    # Each entry: two status letters, a space, the path from the root.
    changed = [e for e in status.split("\0") if e and (root / e[3:]).resolve() != own]
    return f"{commit}+changes" if changed else commit


def write_results(
    out_dir: str | os.PathLike,
    name: str,
    results: dict[str, Any],
    figure: "matplotlib.figure.Figure | None" = None,
) -> dict[str, pathlib.Path]:
    """Writes `results` to `out_dir/name.json` and `figure` to `out_dir/name.png`.

    Both files are written to temporary files in `out_dir` first and renamed
    over the old ones only once both are complete, under a lock on the
    folder: a failed write (a full disk, an unserializable value) leaves the
    old files as they were, and two runs writing at once never leave the
    JSON of one beside the plot of the other. The files are flushed to the
    disk before this returns, so they survive a power loss whole.

    Args:
        out_dir: folder, created if missing.
        name: file stem.
        results: JSON-serializable dict (numpy scalars are converted).
        figure: optional matplotlib figure, closed after saving.

    Returns:
        dict with the `"json"` path and, with a figure, the `"png"` path.
    """
    return _write_files(out_dir, name, results, figure)


def _write_files(out_dir, name, results, figure=None, started_at=None):
    """`write_results`; with `started_at`, files written since then are kept (see `finish_run`)."""
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    try:
        text = json.dumps(results, indent=2, default=_to_builtin) + "\n"
        with _folder_lock(out_dir):
            stem = _free_stem(out_dir, name, started_at)
            paths = {"json": out_dir / f"{stem}.json"}
            if figure is not None:
                paths["png"] = out_dir / f"{stem}.png"
            _replace_together(paths, text, figure)
    finally:
        if figure is not None:
            import matplotlib.pyplot as plt

            plt.close(figure)
    return paths


def _free_stem(out_dir, name, started_at):
    """`name`, or a stem of this run's own when another run's `name.json` came after `started_at`.

    The time compared is when the other run renamed its files into place
    (`_replace_together` sets it as the JSON's modification time), not when
    it began writing them: a run that started while another was still
    writing keeps the other's files.
    """
    existing = out_dir / f"{name}.json"
    if started_at is None or not existing.is_file() or existing.stat().st_mtime < started_at:
        return name
    stem = f"{name}-{time.strftime('%Y%m%dT%H%M%S', time.gmtime())}-{os.getpid()}"
    print(
        f"{existing} was written by another run after this run started: this run's "
        f"results go to {stem}.json (and .png) instead of replacing it."
    )
    return stem


def _replace_together(paths, text, figure):
    """Writes `text` (and `figure`) to temporary files beside `paths`, then renames them all.

    The files are on disk before they are renamed, and the renames once this
    returns (see `write_atomically`). The JSON's modification time is then
    set to the time of its rename, which `_free_stem` compares.
    """
    temporary = {
        kind: path.with_name(f".{path.name}.{os.getpid()}.tmp") for kind, path in paths.items()
    }
    try:
        _write_durably(temporary["json"], lambda file: file.write(text.encode()))
        if figure is not None:
            _write_durably(temporary["png"], lambda file: _save_png(figure, file))
        for kind, path in paths.items():
            os.replace(temporary[kind], path)
        renamed_at = time.time_ns()
        os.utime(paths["json"], ns=(renamed_at, renamed_at))
        _sync_folder(paths["json"].parent)
    finally:
        for path in temporary.values():
            path.unlink(missing_ok=True)


def _save_png(figure, file):
    figure.savefig(file, format="png", dpi=120, bbox_inches="tight")


def write_atomically(path: str | os.PathLike, save) -> pathlib.Path:
    """Writes a file whole or not at all: `save` writes a temporary file, renamed to `path`.

    A failed or interrupted write (an error in `save`, a full disk, a killed
    process) leaves the old file at `path` as it was; the temporary file
    beside it is removed when Python can still do so. The file is flushed to
    the disk (`fsync`) before the rename and its folder after it, so a file
    written survives a power loss whole, not empty.

    Args:
        path: the file to write; its folder must exist.
        save: callable taking an open binary file and writing the content.

    Returns:
        The path, as a `pathlib.Path`.
    """
    path = pathlib.Path(path)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        _write_durably(temporary, save)
        os.replace(temporary, path)
        _sync_folder(path.parent)
    finally:
        temporary.unlink(missing_ok=True)
    return path


def _write_durably(path, save):
    """`save(file)` into a new binary file at `path`, flushed to the disk before it is closed."""
    with open(path, "wb") as file:
        save(file)
        file.flush()
        os.fsync(file.fileno())


def _sync_folder(folder):
    """Flushes `folder`'s entries (the renames into it) to the disk, where folders can be opened."""
    if os.name == "nt":  # Windows cannot open a folder to flush it.
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(descriptor)
    finally:
        os.close(descriptor)


def set_aside(path: str | os.PathLike, problem: str) -> pathlib.Path:
    """Renames a damaged file to `<name>.damaged` and warns that its run starts again.

    A run that cannot read the file it saved (truncated, empty, not what it
    wrote) keeps the file for inspection, renamed (`.damaged-2`, ... when
    the name is taken), and runs again instead of stopping.

    Args:
        path: the damaged file.
        problem: what is wrong with it, for the message.

    Returns:
        The new path, as a `pathlib.Path`.
    """
    path = pathlib.Path(path)
    target, number = path.with_name(f"{path.name}.damaged"), 1
    while target.exists():
        number += 1
        target = path.with_name(f"{path.name}.damaged-{number}")
    os.replace(path, target)
    warnings.warn(
        f"{path} cannot be read ({problem}): it is set aside as {target.name}, and the run "
        "it belongs to starts again.",
        stacklevel=2,
    )
    return target


@contextlib.contextmanager
def _folder_lock(folder):
    """Holds an exclusive lock on `folder` (where the platform has `fcntl`)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory locks; the renames still keep files whole.
        yield
        return
    descriptor = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(descriptor, fcntl.LOCK_EX)
        yield
    finally:
        os.close(descriptor)  # releases the lock


def write_benchmark(
    path: str | os.PathLike, results: dict[str, Any], *, started_at: float
) -> pathlib.Path:
    """Writes a benchmark's `{"meta": ..., "results": results}` JSON to `path` and says where.

    The `meta` block's check for changes leaves `path` out, so a result
    file inside the repository, written once or after each case, does not
    mark its own commit as changed.

    Args:
        path: the JSON file; its folder is created if missing.
        results: JSON-serializable dict of the benchmark's figures.
        started_at: `time.time()` when the benchmark began.

    Returns:
        The path, as a `pathlib.Path`.

    Example:

    >>> import tempfile, time
    >>> path = write_benchmark(tempfile.mkdtemp() + "/demo.json", {"ratio": 1.5},
    ...                        started_at=time.time())  # doctest: +ELLIPSIS
    wrote .../demo.json
    """
    meta = run_metadata(started_at, "benchmark", written=path)
    path = pathlib.Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"meta": meta, "results": results}, indent=1) + "\n"
    with _folder_lock(path.parent):
        _replace_together({"json": path}, text, None)
    print(f"wrote {path}")
    return path


def finish_run(
    out_dir: str | os.PathLike,
    name: str,
    results: dict[str, Any],
    figure: "matplotlib.figure.Figure | None" = None,
    *,
    started_at: float,
    setting: Literal["small", "fast", "full", "benchmark"],
) -> dict[str, pathlib.Path]:
    """Writes a run's results with their `meta` block and says where.

    Every reproduction, the tour and the benchmarks end with this call. The
    JSON holds the keys of `results` plus `"meta"`, the `run_metadata` of the
    run. It prints the paths written and, for the fast setting, that the
    numbers are a smoke test rather than the paper's result.

    The files are written as by `write_results`: whole or not at all, the
    JSON and the plot together. When another run's `name.json` came into
    place after this run started (two runs with the same `out_dir` at once),
    that run's files are kept, even when it began writing them before this
    run started: this run's files get a stem of their own,
    `name-<UTC time>-<process id>`, and the message says so.

    Args:
        out_dir: folder, created if missing.
        name: file stem of the JSON and PNG.
        results: JSON-serializable dict without a `"meta"` key.
        figure: optional matplotlib figure, closed after saving.
        started_at: `time.time()` when the run began.
        setting: `"small"` (the `KERAS_ATTN_SMALL` size, recorded as
            `"fast"`), `"fast"`, `"full"` or `"benchmark"`.

    Returns:
        dict with the `"json"` path and, with a figure, the `"png"` path.

    Example:

    >>> import tempfile, time
    >>> out = tempfile.mkdtemp()
    >>> paths = finish_run(out, "demo", {"accuracy": 0.5}, started_at=time.time(),
    ...                    setting="full")  # doctest: +ELLIPSIS
    Wrote .../demo.json
    """
    if "meta" in results:
        raise ValueError(f"`results` must not hold a 'meta' key. Received: {sorted(results)}")
    fast = setting in ("small", "fast")
    metadata = run_metadata(started_at, "fast" if fast else setting)
    paths = _write_files(out_dir, name, {**results, "meta": metadata}, figure, started_at)
    print("Wrote " + " and ".join(str(path) for path in paths.values()))
    if fast:
        print(SMOKE_TEST_NOTICE)
    return paths


def _to_builtin(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"Cannot write {type(value).__name__} as JSON.")
