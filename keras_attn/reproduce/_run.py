"""The one convention every reproduction follows: its setting, its files, its return value.

A reproduction keeps its sizes in `SETTINGS`, a dict with a `"fast"` and a
`"full"` entry and, optionally, a `"small"` one (the `KERAS_ATTN_SMALL` test
size; without it the fast entry is used). It calls `choose_setting` first and
ends with `finish`, whose return value is what its `run(args)` returns.
"""

import concurrent.futures
import json
import multiprocessing
import os
import threading

import numpy as np

from keras_attn.utils.results import finish_run, is_small_run, set_aside, write_atomically
from keras_attn.utils.validation import int_option

SETTING_NAMES = ("small", "fast", "full")


def setting_name(args):
    """`"small"`, `"fast"` or `"full"`: which setting a reproduction runs.

    `KERAS_ATTN_SMALL` wins over `--full`, so that a test suite or a notebook
    that sets it never starts a full-size run; otherwise `--full` gives the
    full setting and its absence the fast one.

    Args:
        args: the parsed command line; `args.full` is read (missing means
            `False`).

    Returns:
        str, one of `SETTING_NAMES`.
    """
    if is_small_run():
        return "small"
    return "full" if getattr(args, "full", False) else "fast"


def choose_setting(args, settings):
    """The setting `args` asks for, and its name.

    Args:
        args: the parsed command line.
        settings: dict with `"fast"` and `"full"` entries and optionally a
            `"small"` one; a missing small entry falls back to the fast one.

    Returns:
        `(name, setting)`, `name` as returned by `setting_name` and `setting`
        the entry of `settings` it selects (the same object, not a copy).
    """
    missing = {"fast", "full"} - set(settings)
    if missing:
        raise ValueError(
            f"`settings` must hold 'fast' and 'full' entries. Received: settings keys "
            f"{sorted(settings)}"
        )
    name = setting_name(args)
    return name, settings.get(name, settings["fast"]) if name == "small" else settings[name]


def finish(args, name, results, figure=None, *, started_at, setting):
    """Writes a reproduction's results and returns its `run` value.

    The files are written by `keras_attn.utils.finish_run`: whole or not at
    all, the JSON and the plot together, and a run never replaces files
    that another run wrote after it started.

    Args:
        args: the parsed command line; the files go to `args.out`.
        name: the file stem, the reproduction's `NAME`.
        results: JSON-serializable dict without a `"meta"` key.
        figure: optional matplotlib figure, saved next to the JSON.
        started_at: `time.time()` when the run began.
        setting: the setting's name, from `choose_setting`.

    Returns:
        dict with `"setting"` (its name), `"results"` (the `results` written,
        without `"meta"`) and `"paths"` (the `"json"` and, with a figure, the
        `"png"` path written by `keras_attn.utils.finish_run`).
    """
    if setting not in SETTING_NAMES:
        raise ValueError(f"`setting` must be one of {SETTING_NAMES}. Received: setting={setting!r}")
    paths = finish_run(args.out, name, results, figure, started_at=started_at, setting=setting)
    return {"setting": setting, "results": results, "paths": paths}


def mean_and_std(values):
    """`{"mean", "std"}` of `values` over seeds, the sample std (`ddof=1`; 0 for one value)."""
    values = np.asarray(values, dtype="float64")
    std = values.std(ddof=1) if len(values) > 1 else 0.0
    return {"mean": float(values.mean()), "std": float(std)}


def run_in_workers(function, jobs, workers, on_result=None):
    """`[function(*job) for job in jobs]`, in order, in up to `workers` processes.

    With `workers` above 1 (and two jobs or more) the jobs run in fresh
    (spawned) processes of one compute thread each on TensorFlow and torch:
    the runs of these small models each keep about one core busy. A job
    must seed itself, so that where it runs does not change its result. A
    worker ends with its parent process, however the parent ended: a
    killed run leaves no job training on, which a rerun resuming the same
    state would otherwise train a second time beside it.

    Args:
        function: a module-level function (it is pickled for the workers).
        jobs: list of argument tuples.
        workers: int, the most processes at once.
        on_result: optional callable, called with each result as its job
            finishes (in the order they finish).

    Returns:
        list of the results, in the order of `jobs`.
    """
    if workers == 1 or len(jobs) < 2:
        results = []
        for job in jobs:
            results.append(function(*job))
            if on_result is not None:
                on_result(results[-1])
        return results
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(
        min(workers, len(jobs)),
        mp_context=context,
        initializer=_start_worker,
    ) as pool:
        futures = [pool.submit(function, *job) for job in jobs]
        for future in concurrent.futures.as_completed(futures):
            if on_result is not None:
                on_result(future.result())
        return [future.result() for future in futures]


def _start_worker():
    """Prepares a worker process: one compute thread, and an end with its parent's."""
    threading.Thread(target=_exit_with_parent, daemon=True).start()
    _one_thread()


def _exit_with_parent():
    """Ends this worker process as soon as its parent process has ended."""
    multiprocessing.parent_process().join()  # waits on the parent's sentinel
    os._exit(1)


def _one_thread():
    """Limits a worker process to one compute thread on TF and torch (before its first op)."""
    from keras_attn.kernels import runtime

    runtime.use_one_thread()


def add_seeds_argument(parser, default_note="overrides the setting"):
    """Adds the reproductions' `--seeds N` option: runs seeds `0..N-1`.

    Args:
        parser: the reproduction's `argparse` parser.
        default_note: what the help says about the default.
    """
    parser.add_argument(
        "--seeds",
        type=int_option(),
        help=f"Number of seeds N: runs seeds 0..N-1 ({default_note}).",
    )


def check_protocol(state, config):
    """Creates a state folder with `config` in its `protocol.json`, or checks that it matches.

    A resumable reproduction keeps its runs in a state folder; its runs are
    only resumed by a command of the same protocol.

    Args:
        state: `pathlib.Path` of the folder.
        config: JSON-serializable dict, the settings every run shares.

    Raises:
        ValueError: the folder's protocol differs from `config`; the message
            names the settings that differ.
    """
    path = state / "protocol.json"
    if path.is_file():
        saved = read_protocol(path)
        if saved != json.loads(json.dumps(config)):
            changed = sorted(key for key in config if saved.get(key) != config[key])
            raise ValueError(
                f"The state folder {state} holds runs of another protocol (it differs in "
                f"{changed}); pass another --state folder or the same options. Received: "
                + ", ".join(f"{key}={config[key]!r}" for key in changed)
            )
        return
    state.mkdir(parents=True, exist_ok=True)
    text = json.dumps(config, indent=1)
    write_atomically(path, lambda file: file.write(text.encode()))


def read_protocol(path):
    """The settings in a state folder's `protocol.json`, or a `ValueError` that says what to do."""
    try:
        saved = json.loads(path.read_bytes())
        problem = None if isinstance(saved, dict) else f"{saved!r:.100} is not a dict"
    except ValueError as error:  # not JSON, or not UTF-8
        problem = f"{type(error).__name__}: {error}"
    if problem is not None:
        raise ValueError(
            f"{path} cannot be read: it records the options of the runs in its folder. If they "
            "were made with the options of this command, remove it to record them again; "
            f"otherwise pass another --state folder. Received: {problem}"
        )
    return saved


def read_result(path, spec, missing):
    """The finished run `spec`'s result saved as JSON at `path`; `None` when there is none.

    A file that does not hold the run's result (truncated, empty, another
    run's, or one that lacks what a finished run holds) is set aside
    (`keras_attn.utils.results.set_aside`), so that the run trains again.

    Args:
        path: `pathlib.Path` of the JSON file.
        spec: dict, the run's spec; a finished run's result holds its items.
        missing: callable, `missing(result)` → the names of what a finished
            run's result holds and `result` lacks.

    Returns:
        The result, or `None`.
    """
    if not path.is_file():
        return None
    try:
        result = json.loads(path.read_bytes())
        trouble = _result_problem(result, spec, missing)
    except ValueError as error:  # not JSON, or not UTF-8
        trouble = f"{type(error).__name__}: {error}"
    if trouble is None:
        return result
    set_aside(path, trouble)
    return None


def _result_problem(result, spec, missing):
    """What keeps `result` from being the finished run `spec`, or `None`."""
    if not isinstance(result, dict):
        return f"not a run's result: {result!r:.100}"
    other = {key: result.get(key) for key in spec if result.get(key) != spec[key]}
    if other:
        return f"the result of another run: {other}"
    lacking = missing(result)
    return f"missing {lacking}" if lacking else None
