"""The code blocks of the docs pages that show runnable examples run as tests."""

import pathlib
import re

import keras
import pytest

from keras_attn.testing.arrays import assert_allclose

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


README = DOCS.parent / "README.md"
FIRST_MODEL = "## A first model\n"


def _first_model(page):
    """The first ```python block of the page's "A first model" section."""
    section = page.read_text().split(FIRST_MODEL, 1)[-1].split("\n## ", 1)[0]
    found = CODE_BLOCK.search(section)
    assert found, f"{page.name} has no python block under {FIRST_MODEL!r}"
    return found.group(1)


def test_the_readme_and_the_home_page_show_one_first_model():
    code = _first_model(README)
    assert code == _first_model(DOCS / "index.md")
    assert 10 <= len(code.strip().splitlines()) <= 20


@pytest.mark.backend_agnostic
def test_the_readme_first_model_trains_saves_and_exports(tmp_path, monkeypatch):
    if keras.backend.backend() == "torch":
        pytest.skip("a SavedModel from torch needs torch_xla; the README runs on TF and JAX")
    import tensorflow as tf

    monkeypatch.chdir(tmp_path)
    keras.utils.set_random_seed(0)
    namespace = {"__name__": "readme"}
    exec(compile(_first_model(README), "README.md", "exec"), namespace)
    model, x = namespace["model"], namespace["x_train"][:4]
    assert model.jit_compile is True
    assert len(model.history.history["loss"]) == 2
    expected = model.predict(x, verbose=0)
    reloaded = keras.saving.load_model("first_model.keras")
    assert_allclose(reloaded.predict(x, verbose=0), expected, atol=1e-6, rtol=0)
    served = tf.saved_model.load("first_model")
    assert_allclose(served.serve(tf.constant(x)).numpy(), expected, atol=1e-5, rtol=0)
