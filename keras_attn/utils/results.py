"""Writing results as JSON plus a PNG plot, and the small-run switch."""

import json
import os
import pathlib

SMALL_RUN_VARIABLE = "KERAS_ATTN_SMALL"


def is_small_run():
    """True when `KERAS_ATTN_SMALL` is set to a non-empty value other than "0".

    Notebooks and reproductions shrink their data and epochs when it is set;
    the test suite sets it so that they run in seconds.
    """
    return os.environ.get(SMALL_RUN_VARIABLE, "") not in ("", "0")


def write_results(out_dir, name, results, figure=None):
    """Writes `results` to `out_dir/name.json` and `figure` to `out_dir/name.png`.

    Args:
        out_dir: folder, created if missing.
        name: file stem.
        results: JSON-serializable dict (numpy scalars are converted).
        figure: optional matplotlib figure, closed after saving.

    Returns:
        dict with the `"json"` path and, with a figure, the `"png"` path.
    """
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {"json": out_dir / f"{name}.json"}
    paths["json"].write_text(json.dumps(results, indent=2, default=_to_builtin) + "\n")
    if figure is not None:
        import matplotlib.pyplot as plt

        paths["png"] = out_dir / f"{name}.png"
        figure.savefig(paths["png"], dpi=120, bbox_inches="tight")
        plt.close(figure)
    return paths


def _to_builtin(value):
    if hasattr(value, "tolist"):
        return value.tolist()
    raise TypeError(f"Cannot write {type(value).__name__} as JSON.")
