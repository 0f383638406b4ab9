import argparse
import importlib.metadata
import json
import os
import subprocess
import sys

import keras
import pytest

from keras_attn import cli
from keras_attn.utils import is_small_run, write_results


def test_tour_trains_exports_and_reloads(tmp_path, capsys):
    assert is_small_run()  # conftest.py sets KERAS_ATTN_SMALL
    assert cli.main(["tour", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "tour.json").read_text())
    assert results["jit_compile"] is True
    assert results["test_accuracy"] > 0.3  # 10 classes: chance is 0.1
    assert results["saved_model_max_difference"] < 1e-4
    assert (tmp_path / "tour.png").stat().st_size > 0
    assert (tmp_path / "saved_model" / "saved_model.pb").exists()
    assert "Test accuracy" in capsys.readouterr().out


def test_unknown_command_exits_with_usage(capsys):
    with pytest.raises(SystemExit):
        cli.main(["no-such-command"])
    assert "usage: keras-attn" in capsys.readouterr().err


def test_small_run_switch(monkeypatch):
    for value, expected in (("1", True), ("0", False), ("", False), ("yes", True)):
        monkeypatch.setenv("KERAS_ATTN_SMALL", value)
        assert is_small_run() is expected


def test_write_results_converts_numpy_values(tmp_path):
    import numpy as np

    paths = write_results(tmp_path / "out", "demo", {"mean": np.float32(0.5), "xs": np.arange(3)})
    assert json.loads(paths["json"].read_text()) == {"mean": 0.5, "xs": [0, 1, 2]}
    assert "png" not in paths


def test_version_comes_from_the_package_metadata(capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main(["--version"])
    assert raised.value.code == 0
    assert capsys.readouterr().out == f"keras-attn {importlib.metadata.version('keras-attn')}\n"


# What pip writes as the `keras-attn` console script.
CONSOLE_SCRIPT = """\
import re
import sys
from keras_attn.cli import main
if __name__ == "__main__":
    sys.argv[0] = re.sub(r"(-script\\.pyw|\\.exe)?$", "", sys.argv[0])
    sys.exit(main())
"""


@pytest.mark.parametrize("option", ["--help", "--version", "reproduce --help"])
@pytest.mark.parametrize("start", ["console script", "python -m"])
def test_help_and_version_import_neither_keras_nor_a_backend(start, option, tmp_path):
    script = tmp_path / "keras-attn"
    script.write_text(CONSOLE_SCRIPT)
    command = [str(script)] if start == "console script" else ["-m", "keras_attn"]
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    done = subprocess.run(
        [sys.executable, "-X", "importtime", *command, *option.split()],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 0
    assert done.stdout.startswith(("usage: keras-attn", "keras-attn "))
    imported = [line.rsplit("|", 1)[-1].strip() for line in done.stderr.splitlines()]
    assert "keras_attn.cli" in imported
    assert {name.split(".")[0] for name in imported} & {"keras", "tensorflow", "jax", "torch"} == (
        set()
    )
    others = [line for line in done.stderr.splitlines() if not line.startswith("import time:")]
    assert others == []  # no TensorFlow log line


def test_the_one_entry_point_answers_help():
    done = subprocess.run(
        [sys.executable, "-m", "keras_attn", "--help"], capture_output=True, text=True
    )
    assert done.returncode == 0
    assert "usage: keras-attn [-h] [--version] COMMAND" in done.stdout


# Options that make no sense: (command line, the message argparse ends with).
BAD_OPTIONS = [
    ("reproduce parity --steps 0", "argument --steps: must be an integer >= 1. "),
    ("reproduce parity --steps -5", "Received: '-5'"),
    ("reproduce parity --learning-rate nan", "Received: 'nan'"),
    ("reproduce parity --learning-rate -1", "must be a number in (0.0, inf]. "),
    ("reproduce parity --seeds -1", "argument --seeds: must be an integer >= 1. "),
    ("reproduce parity --train-lengths 10 0", "argument --train-lengths: "),
    ("reproduce parity --workers 0", "argument --workers: "),
    ("reproduce mimetic --seeds 0", "argument --seeds: "),
    ("reproduce mimetic --train-sizes x", "Received: 'x'"),
    ("reproduce bsarec --alpha 1.5", "must be a number in [0.0, 1.0]. Received: '1.5'"),
    ("reproduce bsarec --learning-rate inf", "argument --learning-rate: "),
    ("reproduce bsarec --batch-size 0", "argument --batch-size: "),
    ("reproduce adavit --gammas 0.5 0", "must be a number in (0.0, 1.0]. "),
    ("reproduce t2t --train-size 70000", "must be an integer in [1, 60000]. "),
    ("reproduce topics --seed -1", "argument --seed: must be an integer >= 0. "),
    ("reproduce heads --seed 1.5", "argument --seed: "),
    ("reproduce logsparse --seed -1", "argument --seed: "),
    ("reproduce ffn-memories --top-k 0", "argument --top-k: "),
    ("tour --epochs 0", "argument --epochs: "),
]


@pytest.mark.parametrize(("command", "message"), BAD_OPTIONS, ids=[line for line, _ in BAD_OPTIONS])
def test_an_option_that_makes_no_sense_ends_the_parse(command, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as raised:
        cli.main([*command.split(), "--out", str(tmp_path / "out")])
    assert raised.value.code == 2
    assert message in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("command", [["tour"], ["reproduce", "parity"]])
def test_an_unwritable_out_is_refused_before_anything_runs(command, tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    for out, message in (
        (a_file, f"argument --out: cannot be a folder: {a_file} is a file. "),
        (a_file / "results", f"argument --out: cannot be a folder: {a_file} is a file. "),
        ("", "argument --out: must be a folder. Received: ''"),
    ):
        with pytest.raises(SystemExit):
            cli.main([*command, "--out", str(out)])
        assert message in capsys.readouterr().err
    assert [path.name for path in tmp_path.iterdir()] == ["a_file"]
    assert a_file.read_text() == "kept"


def test_a_creatable_out_is_accepted_and_not_created(tmp_path):
    out = tmp_path / "new" / "results"
    args = cli.build_parser(["reproduce", "parity"]).parse_args(
        ["reproduce", "parity", "--out", str(out), "--steps", "3", "--learning-rate", "1e-3"]
    )
    assert (args.out, args.steps, args.learning_rate) == (str(out), 3, 0.001)
    assert list(tmp_path.iterdir()) == []


def test_the_help_says_which_reproductions_take_seeds():
    parser = cli.build_parser(["reproduce", "parity"])
    reproduce_parser = _subparser(parser, "reproduce")
    seeds = "--seeds N runs the seeds 0, 1, ..., N-1 in adavit, adavit-converged, bsarec, mimetic, "
    assert seeds + "parity, t2t, " in " ".join(reproduce_parser.description.split())
    papers = _subparser(reproduce_parser, "parity")
    assert "--seeds N runs the seeds" in " ".join(papers.description.split())
    logsparse = cli.build_parser(["reproduce", "logsparse"])
    description = _subparser(_subparser(logsparse, "reproduce"), "logsparse").description
    assert "--seeds" not in description
    assert "order of magnitude" in description and "docs/results.md" in description


def _subparser(parser, name):
    (commands,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    return commands.choices[name]


@pytest.mark.backend_agnostic
def test_the_tour_refuses_only_a_backend_it_cannot_export_from(monkeypatch, tmp_path, capsys):
    from keras_attn import tour

    assert tour.export_refusal("tensorflow") is None
    assert tour.export_refusal("jax") is None  # TensorFlow is installed
    assert "Received: KERAS_BACKEND='torch'" in tour.export_refusal("torch")
    if keras.backend.backend() == "torch":  # refused before any data is read
        with pytest.raises(SystemExit, match="from TensorFlow or JAX only"):
            cli.main(["tour", "--out", str(tmp_path / "tour")])
        assert list(tmp_path.iterdir()) == []
    monkeypatch.setitem(sys.modules, "tensorflow", None)  # as if it were not installed
    assert 'pip install "keras-attn[tensorflow]"' in tour.export_refusal("jax")


@pytest.mark.slow
@pytest.mark.backend_agnostic
def test_the_tour_trains_exports_and_reloads_wherever_it_can_export(tmp_path):
    from keras_attn import tour

    if tour.export_refusal(keras.backend.backend()):
        pytest.skip("the refusal is tested above")
    assert cli.main(["tour", "--out", str(tmp_path)]) == 0
    results = json.loads((tmp_path / "tour.json").read_text())
    assert results["saved_model_max_difference"] < 1e-4


STEPS_NOT_A_MULTIPLE = [
    ("small", ["t2t", "--steps", "7"], "a multiple of 2, the number of evaluations of the 'small'"),
    ("fast", ["t2t", "--steps", "7"], "a multiple of 3, the number of evaluations of the 'fast'"),
    ("full", ["t2t", "--full", "--steps", "15"], "a multiple of 10, the number of evaluations"),
    ("small", ["mimetic", "--steps", "7"], "a multiple of 3, the number of evaluations"),
    ("fast", ["mimetic", "--steps", "12"], "a multiple of 8, the number of evaluations"),
]


@pytest.mark.parametrize(
    ("setting", "argv", "message"),
    STEPS_NOT_A_MULTIPLE,
    ids=[" ".join(argv) for _, argv, _ in STEPS_NOT_A_MULTIPLE],
)
def test_steps_the_evaluations_do_not_divide_end_the_parse(
    setting, argv, message, monkeypatch, tmp_path, capsys
):
    if setting != "small":
        monkeypatch.delenv("KERAS_ATTN_SMALL", raising=False)
    with pytest.raises(SystemExit) as raised:
        cli.main(["reproduce", *argv, "--out", str(tmp_path / "out")])
    assert raised.value.code == 2
    output = capsys.readouterr()
    assert f"keras-attn reproduce {argv[0]}: error: argument --steps: must be {message}" in (
        output.err
    )
    assert f"Received: steps={argv[-1]}" in output.err
    assert output.out == ""  # refused before the setting is announced
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("paper", ["t2t", "mimetic"])
def test_steps_the_evaluations_divide_pass_the_check(paper, tmp_path):
    argv = ["reproduce", paper, "--steps", "12", "--out", str(tmp_path)]
    args = cli.build_parser(argv).parse_args(argv)
    assert args.check_arguments(args) is None


def test_a_state_at_a_file_is_refused_before_anything_runs(tmp_path, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("kept")
    with pytest.raises(SystemExit) as raised:
        cli.main(["reproduce", "bsarec", "--out", str(tmp_path / "out"), "--state", str(a_file)])
    assert raised.value.code == 2
    assert f"argument --state: cannot be a folder: {a_file} is a file. " in capsys.readouterr().err
    assert [path.name for path in tmp_path.iterdir()] == ["a_file"]
    assert a_file.read_text() == "kept"
