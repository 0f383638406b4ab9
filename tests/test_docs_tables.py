import ast
import json
import shutil

import matplotlib
import pytest

from tools import docs_tables
from tools.docs_table_specs import TABLES

DOCS, RESULTS = docs_tables.ROOT / "docs", docs_tables.ROOT / "results"


def test_docs_agree_with_committed_results():
    assert docs_tables.update(DOCS, RESULTS, check=True) == []


@pytest.fixture
def copies(tmp_path):
    shutil.copytree(DOCS, tmp_path / "docs")
    shutil.copytree(RESULTS, tmp_path / "results")
    return tmp_path / "docs", tmp_path / "results"


def test_check_fails_when_a_docs_number_is_edited(copies):
    docs, results = copies
    page = docs / "parity-first.md"
    text = page.read_text()
    start = text.index("<!-- results:table parity-first-fast -->")
    cell = text.index("| FIRST | 10 |", start)
    page.write_text(text[:cell] + "| FIRST | 11 |" + text[cell + len("| FIRST | 10 |") :])
    assert docs_tables.update(docs, results, check=True) == [page]
    assert docs_tables.main(["--docs", str(docs), "--results", str(results), "--check"]) == 1
    docs_tables.update(docs, results)  # regenerating restores the page
    assert page.read_text() == text


def test_check_fails_when_a_result_file_changes(copies):
    docs, results = copies
    path = results / "mimetic-full.json"
    data = json.loads(path.read_text())
    data["experiments"][0]["summary"]["difference"]["mean"] += 0.5
    path.write_text(json.dumps(data))
    assert docs / "mimetic-init.md" in docs_tables.update(docs, results, check=True)


def test_value_marker_formats_the_looked_up_number(tmp_path):
    (tmp_path / "run-fast.json").write_text(json.dumps({"a": {"b": [0.5, 0.123456]}}))
    text = "x <!-- results:value run-fast a/b/1 .3f -->?<!-- /results --> y"
    generated = docs_tables.generate(text, docs_tables.Results(tmp_path))
    assert generated == "x <!-- results:value run-fast a/b/1 .3f -->0.123<!-- /results --> y"
    listed = "<!-- results:value run-fast a/b .1f -->?<!-- /results -->"
    assert "-->0.5, 0.1<!--" in docs_tables.generate(listed, docs_tables.Results(tmp_path))


def test_missing_result_file_is_an_error(tmp_path):
    text = "<!-- results:value absent-fast a .3f -->1<!-- /results -->"
    with pytest.raises(FileNotFoundError, match="absent-fast"):
        docs_tables.generate(text, docs_tables.Results(tmp_path))


def test_every_result_file_records_how_it_was_made():
    for stem in docs_tables.Results(RESULTS).stems():
        meta = json.loads((RESULTS / f"{stem}.json").read_text())["meta"]
        assert meta["setting"] in ("fast", "full", "benchmark"), stem
        assert {"command", "commit", "wall_time_s", "load_average", "date"} <= set(meta), stem


def test_the_package_does_not_import_the_repository_tooling():
    package = docs_tables.ROOT / "keras_attn"
    for path in package.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [node.module or ""]
            else:
                continue
            assert not any(name.split(".")[0] == "tools" for name in names), path


def test_a_value_at_the_start_of_a_line_stays_in_its_sentence():
    text = "wall time\n<!-- results:value run-fast a .0f -->60<!-- /results --> s"
    assert docs_tables.on_page_markdown(text) == "wall time\n60 s"
    code = "```markdown\n" + text + "\n```"
    assert docs_tables.on_page_markdown(code) == code


def test_runs_table_lists_a_run_as_pending_until_its_file_is_committed(tmp_path):
    meta = {"setting": "full", "wall_time_s": 12.3}
    command = "keras-attn reproduce heads --full --out runs/heads"
    (tmp_path / "heads-full.json").write_text(json.dumps({"meta": {"command": command, **meta}}))
    rows = TABLES["reproduction-runs"](docs_tables.Results(tmp_path)).splitlines()
    heads = next(row for row in rows if "[`heads`]" in row)
    fast, full = heads.strip("| ").split(" | ")[1:]
    assert (fast, full) == ("**pending**", "`results/heads-full.json` (12 s)")
    script = "python benchmarks/head_pruning.py --output out.json"
    rows = TABLES["benchmark-runs"](docs_tables.Results(tmp_path)).splitlines()
    assert "| `benchmarks/head_pruning.py` | **pending** |" in rows
    (tmp_path / "pruning.json").write_text(json.dumps({"meta": {"command": script, **meta}}))
    rows = TABLES["benchmark-runs"](docs_tables.Results(tmp_path)).splitlines()
    assert "| `benchmarks/head_pruning.py` | `results/pruning.json` (12 s) |" in rows


def test_bsarec_search_lists_the_shared_run_once_and_bolds_the_choice():
    def run(alpha, cutoff, ndcg):
        return {"alpha": alpha, "cutoff": cutoff, "best_valid_ndcg20": ndcg, "epochs_run": 15}

    # The alpha stage at c = 3, then the c stage at the best alpha, which repeats (0.1, 3).
    candidates = [run(0.1, 3, 0.14), run(0.3, 3, 0.13), run(0.1, 1, 0.15), run(0.1, 3, 0.14)]
    data = {"search": {"chosen": [0.1, 1], "candidates": candidates}}
    rows = TABLES["bsarec-full-search"](lambda stem: data).splitlines()[2:]
    assert rows == [
        "| 0.1 | 3 | 0.1400 | 15 |",
        "| 0.3 | 3 | 0.1300 | 15 |",
        "| **0.1** | **1** | **0.1500** | **15** |",
    ]


def test_check_fails_when_a_figure_or_its_result_file_changes(copies):
    docs, results = copies
    figure = docs / "img" / "adavit-tradeoff.svg"
    drawn = figure.read_text()
    path = results / "adavit-full.json"
    data = json.loads(path.read_text())
    data["summary"]["full"]["latency_ms"]["mean"] *= 2
    path.write_text(json.dumps(data))
    assert docs_tables.update(docs, results, check=True) == [docs / "adavit.md", figure]
    assert figure.read_text() == drawn  # a check changes nothing
    docs_tables.update(docs, results)  # regenerating redraws it
    assert figure.read_text() != drawn
    assert docs_tables.update(docs, results, check=True) == []


def test_a_figure_marker_links_its_drawing(copies):
    docs, results = copies
    figure = docs / "img" / "adavit-tradeoff.svg"
    with matplotlib.rc_context({"lines.linewidth": 5, "font.size": 20}):
        assert docs_tables.update(docs, results, check=True) == []  # the caller's style is not used
    figure.unlink()
    assert docs_tables.update(docs, results, check=True) == [figure]
    page = (docs / "adavit.md").read_text()
    assert "](img/adavit-tradeoff.svg)\n<!-- /results -->" in page


def test_the_deployment_matrix_is_one_grid_with_each_path_heading_its_backends():
    grid = TABLES["deployment-matrix"](docs_tables.Results(RESULTS)).splitlines()
    assert grid[0] == '<table class="deployment-grid">'
    paths = '<th colspan="3">SavedModel</th><th colspan="3">ONNX</th><th colspan="1">LiteRT</th>'
    assert grid[2] == f'<tr><th rowspan="2">layer or builder</th>{paths}</tr>'
    assert (
        grid[3]
        == "<tr>"
        + "".join(
            f"<th>{backend}</th>" for backend in ("TF", "JAX", "torch", "TF", "JAX", "torch", "TF")
        )
        + "</tr>"
    )
    rows = [row for row in grid if row.startswith("<tr><td>")]
    cases = json.loads((RESULTS / "deployment-matrix.json").read_text())["results"]
    assert len(rows) == len(cases["tensorflow"]["saved_model"])
    assert all(row.count("<td>") == 8 for row in rows)


def test_attention_speed_targets_take_the_median_over_the_runs_of_the_record_commit(tmp_path):
    def run(commit, torch_ratio):
        rows = [
            {
                "backend": backend,
                "length": length,
                "causal_over_logsparse": ratio,
                "causal_over_sdpa": 3.0,
            }
            for backend, ratio in (("torch", torch_ratio), ("jax", 9.0), ("tensorflow", 9.0))
            for length in (1024, 4096, 8192, 16384)
        ]
        ratios = [{"length": length, "ratio": 1.1} for length in (1024, 4096, 8192, 16384)]
        results = {"rows": rows, "jax_over_tensorflow": ratios}
        return json.dumps({"meta": {"commit": commit}, "results": results})

    folder = tmp_path / "benchmarks"
    folder.mkdir()
    (folder / "attention_speed.json").write_text(run("new", 12.0))
    (folder / "attention_speed_run2.json").write_text(run("new", 8.0))
    (folder / "attention_speed_run3.json").write_text(run("new", 30.0))
    (folder / "attention_speed_old.json").write_text(run("old", 0.5))  # other code: not counted
    rows = TABLES["attention-speed-targets"](docs_tables.Results(tmp_path)).splitlines()
    assert rows[0] == (
        "| target | `attention_speed` | `attention_speed_run2` | `attention_speed_run3` "
        "| median | met |"
    )
    assert (
        "| torch causal / LogSparse at 8,192 (≥ 10) | 12.00 | 8.00 | 30.00 | 12.00 | yes |" in rows
    )
    assert "| JAX / TF LogSparse at 1,024 (≤ 1.3) | 1.10 | 1.10 | 1.10 | 1.10 | yes |" in rows
    assert "| JAX causal / torch SDPA at 4,096 (≤ 2) | 3.00 | 3.00 | 3.00 | 3.00 | **no** |" in rows
    lowest = "| lowest causal / LogSparse from 1,024, any backend (≥ 1) |"
    assert f"{lowest} 9.00 | 8.00 | 9.00 | 9.00 | yes |" in rows
    # A second machine's runs of the same commit: their own table, not the record's.
    (folder / "attention_speed_second_machine_run1.json").write_text(run("new", 25.0))
    (folder / "attention_speed_second_machine_run2.json").write_text(run("new", 21.0))
    assert TABLES["attention-speed-targets"](docs_tables.Results(tmp_path)).splitlines() == rows
    second = TABLES["attention-speed-targets-second-machine"](docs_tables.Results(tmp_path))
    second = second.splitlines()
    assert second[0] == (
        "| target | `attention_speed_second_machine_run1` "
        "| `attention_speed_second_machine_run2` | median | met |"
    )
    assert "| torch causal / LogSparse at 8,192 (≥ 10) | 25.00 | 21.00 | 23.00 | yes |" in second
