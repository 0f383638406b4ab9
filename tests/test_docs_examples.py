"""The code blocks of the docs pages that show runnable examples run as tests."""

import pathlib
import re

import keras
import pytest

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
# Pages whose ```python blocks run, in order, as one script.
RUNNABLE_PAGES = ["your-models.md"]
CODE_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)


@pytest.mark.slow  # the examples fit and save models: half a minute
@pytest.mark.parametrize("page", RUNNABLE_PAGES)
def test_page_code_blocks_run(page, tmp_path, monkeypatch):
    blocks = CODE_BLOCK.findall((DOCS / page).read_text())
    assert blocks, f"{page} has no python code block"
    monkeypatch.chdir(tmp_path)
    keras.utils.set_random_seed(0)
    namespace = {"__name__": f"docs_{page}"}
    for block in blocks:
        exec(compile(block, f"{page}", "exec"), namespace)
