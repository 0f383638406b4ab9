"""A training run's state in one file: resumed where it stopped, the same result.

A state file (`.npz`) holds every model variable (weights, and the seeds of
dropout and sampling layers), the optimizer's variables, optionally a set of
best weights, and a JSON record of the run's progress. It is replaced whole
or not at all. The recommenders' `fit_recommender` and the long AdaViT
reproduction save and resume their runs with it.
"""

import json
import zipfile
import zlib

import keras
import numpy as np

from keras_attn.utils.results import set_aside, write_atomically

ARRAY_GROUPS = ("model", "optimizer", "best")


def save_run_state(path, model, record, best_weights=()):
    """Writes `model`'s variables, its optimizer's, `best_weights` and `record` to `path`.

    Args:
        path: the state file, a `.npz`.
        model: a compiled `keras.Model` whose optimizer is built.
        record: JSON-serializable dict, the run's progress.
        best_weights: sequence of arrays, such as the weights of the best epoch.
    """
    arrays = _numbered_arrays("model", model.variables)
    arrays.update(_numbered_arrays("optimizer", model.optimizer.variables))
    arrays.update(_numbered_arrays("best", best_weights))
    arrays["record"] = np.array(json.dumps(record))
    write_atomically(path, lambda file: np.savez(file, **arrays))


def read_run_state(path, fields):
    """`(record, arrays)` of a state file, or `None` with the file set aside when unreadable.

    A file that cannot be read (truncated, empty, not a state file, or a
    record without one of `fields`) is renamed to `<name>.damaged` with a
    warning (`keras_attn.utils.results.set_aside`).

    Args:
        path: the state file.
        fields: dict mapping each key of the record to the keys its value
            must hold (an empty tuple for a plain value); the returned
            record holds these only.

    Returns:
        `(record, arrays)`, `arrays` mapping each of `ARRAY_GROUPS` to a
        list of arrays; or `None`.
    """
    try:
        with np.load(path, allow_pickle=False) as data:
            stored = {name: data[name] for name in data.files}
        saved = json.loads(str(stored["record"]))
        record = {
            key: {name: saved[key][name] for name in names} if names else saved[key]
            for key, names in fields.items()
        }
        arrays = {group: _numbered(stored, group) for group in ARRAY_GROUPS}
    # np.load's errors for a truncated, empty or foreign file; a missing entry.
    except (EOFError, ValueError, KeyError, TypeError, zipfile.BadZipFile, zlib.error) as error:
        set_aside(path, f"{type(error).__name__}: {error}")
        return None
    return record, arrays


def restore_run_state(path, model, arrays):
    """Assigns the `"model"` and `"optimizer"` arrays of a state file to `model`.

    Every group is checked against the model's variables before anything is
    assigned: a state of another model raises a `ValueError` that names the
    file, and changes nothing. The `"best"` arrays, when there are any, must
    fit `model.weights`.

    Args:
        path: the state file, for the message.
        model: the compiled `keras.Model`, its optimizer built.
        arrays: the arrays of `read_run_state`.
    """
    restored = {"model": model.variables, "optimizer": model.optimizer.variables}
    best = model.weights if arrays["best"] else []
    for group, variables in {**restored, "best": best}.items():
        _check_fits(path, group, arrays[group], variables)
    for group, variables in restored.items():
        for variable, value in zip(variables, arrays[group], strict=True):
            variable.assign(value)


def _numbered(stored, group):
    """`[stored["<group>_0"], stored["<group>_1"], ...]`, as many as `stored` holds."""
    count = sum(name.startswith(f"{group}_") for name in stored)
    return [stored[f"{group}_{index}"] for index in range(count)]


def _check_fits(path, group, arrays, variables):
    """Raises unless the state's `group` arrays have the shapes of `variables`, the model's."""
    stored = [tuple(array.shape) for array in arrays]
    if stored != [tuple(variable.shape) for variable in variables]:
        raise ValueError(
            f"The state file {path} does not fit this model: its {group} arrays differ from the "
            f"model's {len(variables)} {group} variables. Pass the state file of this model's "
            f"run, or remove it to train from the first epoch. Received: {len(stored)} {group} "
            f"arrays of shapes {stored[:3]}{'...' if len(stored) > 3 else ''}"
        )


def _numbered_arrays(group, values):
    return {f"{group}_{i}": keras.ops.convert_to_numpy(v) for i, v in enumerate(values)}
