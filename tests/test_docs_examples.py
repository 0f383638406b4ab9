"""The code blocks of the docs pages that show runnable examples run as tests."""

import pathlib
import re

import keras
import numpy as np
import pytest

from keras_attn.testing.arrays import assert_allclose

DOCS = pathlib.Path(__file__).resolve().parents[1] / "docs"
# Pages whose ```python blocks run, in order, as one script.
RUNNABLE_PAGES = ["your-models.md"]
CODE_BLOCK = re.compile(r"^```python\n(.*?)^```$", re.MULTILINE | re.DOTALL)
FENCE = re.compile(r"^```.*?^```$", re.MULTILINE | re.DOTALL)


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


def _section_code(page, heading):
    """The ```python blocks of the page's section `heading`, up to the next heading as high."""
    text = page.read_text()
    start = text.index(f"\n{heading}\n") + len(heading) + 2
    # Code blocks blanked out (offsets kept), so that a `# comment` is not a heading.
    prose = FENCE.sub(lambda block: re.sub(r"[^\n]", " ", block.group()), text)
    level = len(heading.split(" ", 1)[0])
    end = re.compile(rf"^#{{1,{level}}} ", re.MULTILINE).search(prose, start)
    blocks = CODE_BLOCK.findall(text[start : end.start() if end else len(text)])
    assert blocks, f"{page.name} has no python block under {heading!r}"
    return "\n".join(blocks)


def _run(code, filename):
    namespace = {"__name__": filename}
    exec(compile(code, filename, "exec"), namespace)
    return namespace


def test_the_readme_and_the_home_page_show_one_first_model():
    code = _section_code(README, "## A first model")
    assert code == _section_code(DOCS / "index.md", "## A first model")
    assert 10 <= len(code.strip().splitlines()) <= 20


@pytest.mark.backend_agnostic
def test_the_readme_first_model_trains_saves_and_exports(tmp_path, monkeypatch):
    if keras.backend.backend() == "torch":
        pytest.skip("a SavedModel from torch needs torch_xla; the README runs on TF and JAX")
    import tensorflow as tf

    monkeypatch.chdir(tmp_path)
    keras.utils.set_random_seed(0)
    namespace = _run(_section_code(README, "## A first model"), "README.md")
    model, x = namespace["model"], namespace["x_train"][:4]
    assert model.jit_compile is True
    assert len(model.history.history["loss"]) == 2
    expected = model.predict(x, verbose=0)
    reloaded = keras.saving.load_model("first_model.keras")
    assert_allclose(reloaded.predict(x, verbose=0), expected, atol=1e-6, rtol=0)
    served = tf.saved_model.load("first_model")
    assert_allclose(served.serve(tf.constant(x)).numpy(), expected, atol=1e-5, rtol=0)


@pytest.mark.backend_agnostic
def test_the_keras_hub_recipe_of_the_ffn_memories_page_runs():
    keras.utils.set_random_seed(0)
    code = _section_code(DOCS / "ffn-memories.md", "### A KerasHub model")
    namespace = _run(code, "ffn-memories.md")
    backbone, analysis = namespace["backbone"], namespace["analysis"]
    blocks = [backbone.get_layer(f"transformer_layer_{i}") for i in range(2)]
    assert analysis.site_names == ["transformer_layer_0", "transformer_layer_1"]
    assert [site.hidden for site in namespace["sites"]] == [
        block._feedforward_intermediate_dense for block in blocks
    ]
    assert [table.shape for table in analysis.trigger_scores] == [(16, 3)] * 2
    assert analysis.num_positions == 4 * 7


@pytest.mark.slow  # two trainings and two compilations of the fast path: three minutes
@pytest.mark.backend_agnostic
def test_the_adavit_recipe_runs_at_a_small_size(monkeypatch, capsys):
    monkeypatch.setenv("KERAS_ATTN_SMALL", "1")
    keras.utils.set_random_seed(0)
    namespace = _run(
        _section_code(DOCS / "adavit.md", "## Recipe: AdaViT on your own ViT"), "adavit"
    )
    model, tempered, stopping = namespace["model"], namespace["tempered"], namespace["stopping"]
    assert len(namespace["vit"].history.history["val_accuracy"]) == 2
    history = model.history.history
    assert len(history["val_usage_tokens"]) == len(history["val_at_target"]) == 2
    assert tempered.tempered_inference and not model.tempered_inference
    for mine, theirs in zip(tempered.get_weights(), model.get_weights(), strict=True):
        np.testing.assert_array_equal(mine, theirs)
    learned, random = namespace["learned"], namespace["random"]
    assert np.all(learned.macs <= namespace["fast"].full_macs())
    assert model.usage(random.decisions)["patches"] == pytest.approx(
        model.usage(learned.decisions)["patches"], abs=1 / 49
    )
    out = capsys.readouterr().out
    assert "official {" in out and "tempered {" in out and "learned: accuracy" in out
    assert stopping.best_epoch is None or stopping.best_epoch in (0, 1)
