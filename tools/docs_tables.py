"""Docs tables and figures from the committed result files in `results/`, and package lists.

A docs page marks each generated part with a pair of HTML comments:

    <!-- results:table NAME -->
    ...generated markdown table...
    <!-- /results -->

    <!-- results:value FILE PATH FORMAT -->0.6905<!-- /results -->

    <!-- results:figure NAME -->
    ![alternative text](img/NAME.svg)
    <!-- /results -->

    <!-- results:package PACKAGE -->
    - [`name`][PACKAGE.name]: the first paragraph of its docstring.
    <!-- /results -->

`NAME` is a key of `TABLES` (a table) or of `docs_figures.FIGURES` (a
figure, drawn into `docs/img/NAME.svg`); `PACKAGE` is a public package of
keras_attn, whose `__all__` `docs_api` lists; `FILE` is a result file's
stem under `results/` (`mimetic-full` for `results/mimetic-full.json`);
`PATH` walks the JSON by keys and list indices separated by `/`
(`summary/mimetic/mean`); `FORMAT` is a Python format spec (`.4f`,
required), applied to each item of a list (joined by ", "); a key may
contain spaces. `<!-- results:index -->` lists every result file with its
setting, commit, wall time and load.

Run `python -m tools.docs_tables` from the repository root to rewrite the
pages, lists and figures and `python -m tools.docs_tables --check` to fail
when one differs from what the files and packages give. This is repository
tooling: it reads `docs/` and `results/` of a checkout and is not part of
the installed package.
"""

import argparse
import json
import pathlib
import re
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
MARKER = re.compile(
    r"<!-- results:(?P<kind>table|value|index|figure|package)(?P<args>[^>]*?) -->"
    r"(?P<body>.*?)<!-- /results -->",
    re.DOTALL,
)
VALUE = re.compile(r"<!-- results:value [^>]*? -->(?P<value>.*?)<!-- /results -->")


class Results:
    """Reads result files from a folder, each once."""

    def __init__(self, folder):
        self.folder = pathlib.Path(folder)
        self._cache = {}

    def __call__(self, stem):
        if stem not in self._cache:
            path = self.folder / f"{stem}.json"
            if not path.exists():
                raise FileNotFoundError(f"No result file {path} for a docs table.")
            self._cache[stem] = json.loads(path.read_text())
        return self._cache[stem]

    def exists(self, stem):
        """Whether `results/STEM.json` is there."""
        return (self.folder / f"{stem}.json").exists()

    def stems(self):
        """Every result file's stem, `benchmarks/name` for those in subfolders."""
        return sorted(
            str(path.relative_to(self.folder).with_suffix(""))
            for path in self.folder.rglob("*.json")
        )


def lookup(data, path):
    """The value at `path` (keys and list indices joined by `/`) in `data`."""
    value = data
    for key in path.split("/"):
        value = value[int(key)] if isinstance(value, list) else value[key]
    return value


def markdown_table(header, rows):
    """A markdown table from a header and rows of cells."""
    lines = [header, ["---"] * len(header), *rows]
    return "\n".join("| " + " | ".join(str(cell) for cell in line) + " |" for line in lines)


def index_table(results):
    """One row per result file: setting, command, commit, wall time, load."""
    rows = []
    for stem in results.stems():
        meta = results(stem).get("meta", {})
        load = meta.get("load_average", [])
        rows.append(
            [
                f"`results/{stem}.json`",
                meta.get("setting", "?"),
                f"`{meta.get('command', '?')}`",
                f"`{str(meta.get('commit', '?'))[:10]}`",
                meta.get("date", "?"),
                f"{meta['wall_time_s']:.0f}" if "wall_time_s" in meta else "?",
                " / ".join(f"{value:.1f}" for value in load) or "?",
                meta.get("cpu_count", "?"),
            ]
        )
    header = ["file", "setting", "command", "commit", "date (UTC)", "wall time (s)"]
    return markdown_table(header + ["load average (1/5/15 min)", "CPUs"], rows)


def render(kind, args, results):
    """The generated text for one marker."""
    if kind == "index":
        return "\n" + index_table(results) + "\n"
    if kind == "table":
        from tools.docs_table_specs import TABLES

        name = args.strip()
        if name not in TABLES:
            raise KeyError(f"Unknown docs table {name!r}; known: {sorted(TABLES)}")
        return "\n" + TABLES[name](results) + "\n"
    if kind == "package":
        from tools.docs_api import package_list

        return "\n" + package_list(args.strip()) + "\n"
    if kind == "figure":
        from tools.docs_figures import alt_text

        name = args.strip()
        return f"\n![{alt_text(name)}](img/{name}.svg)\n"
    stem, *path, spec = args.split()
    value = lookup(results(stem), " ".join(path))
    if isinstance(value, list):
        return ", ".join(format(item, spec) for item in value)
    return format(value, spec)


def on_page_markdown(markdown, **kwargs):
    """The page without the comments around its values: an mkdocs hook.

    Markdown starts an HTML block at a line that starts with a comment, which
    ends the paragraph before a value at the start of a line; without its
    comments the value stays in its sentence. Code blocks keep their markers.
    """
    lines = markdown.split("\n")
    in_code = False
    for index, line in enumerate(lines):
        if line.lstrip().startswith("```"):
            in_code = not in_code
        elif not in_code:
            lines[index] = VALUE.sub(r"\g<value>", line)
    return "\n".join(lines)


def generate(text, results):
    """`text` with every marker's body regenerated from `results`."""

    def replace(match):
        body = render(match["kind"], match["args"], results)
        return f"<!-- results:{match['kind']}{match['args']} -->{body}<!-- /results -->"

    return MARKER.sub(replace, text)


def figures(text, docs_dir, results):
    """`{path: SVG text}` of each figure that `text` marks, under `docs_dir/img`."""
    from tools.docs_figures import svg

    names = [match["args"].strip() for match in MARKER.finditer(text) if match["kind"] == "figure"]
    return {pathlib.Path(docs_dir) / "img" / f"{name}.svg": svg(name, results) for name in names}


def update(docs_dir, results_dir, check=False):
    """Regenerates every page and figure in `docs_dir`; returns the files that differed.

    With `check=True` the files are left as they are.
    """
    results = Results(results_dir)
    changed = []
    for page in sorted(pathlib.Path(docs_dir).glob("*.md")):
        text = page.read_text()
        files = {page: generate(text, results), **figures(text, docs_dir, results)}
        for path, new in files.items():
            if not path.exists() or path.read_text() != new:
                changed.append(path)
                if not check:
                    path.write_text(new)
    return changed


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--docs", default=ROOT / "docs", help="Folder of docs pages.")
    parser.add_argument("--results", default=ROOT / "results", help="Folder of result files.")
    parser.add_argument(
        "--check", action="store_true", help="Fail if a page differs; change nothing."
    )
    args = parser.parse_args(argv)
    changed = update(args.docs, args.results, check=args.check)
    for page in changed:
        verb = "differs from its result files" if args.check else "regenerated"
        print(f"{page}: {verb}")
    return 1 if args.check and changed else 0


if __name__ == "__main__":
    sys.exit(main())
