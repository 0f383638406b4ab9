"""The docs site shows every notebook, with the outputs of a clean run."""

import json
import pathlib

import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _nav_pages(entries):
    for entry in entries:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            yield from _nav_pages(value) if isinstance(value, list) else [value]


def test_every_notebook_is_a_page_of_the_site():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    pages = set(_nav_pages(config["nav"]))
    assert len(NOTEBOOKS) >= 10
    assert {f"notebooks/{path.name}" for path in NOTEBOOKS} <= pages
    assert (ROOT / "docs" / "notebooks").resolve() == ROOT / "notebooks"


def test_every_notebook_stores_the_outputs_of_one_clean_run():
    for path in NOTEBOOKS:
        cells = json.loads(path.read_text())["cells"]
        code = [cell for cell in cells if cell["cell_type"] == "code"]
        # Run top to bottom once: the counts are 1, 2, ..., as a fresh kernel gives.
        assert [cell["execution_count"] for cell in code] == list(range(1, len(code) + 1)), path
        outputs = [output for cell in code for output in cell["outputs"]]
        assert outputs, path
        assert not [output for output in outputs if output["output_type"] == "error"], path
        streams = [output for output in outputs if output["output_type"] == "stream"]
        assert all(output["name"] == "stdout" for output in streams), path
