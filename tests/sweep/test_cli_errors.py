"""Every command line fails in one clear line (exit status 2), and its --help is complete.

The convention (``treespec_sim.cli``): an argument error or a bad input is one line
``prog: error: message`` on stderr, without the usage block or a traceback; ``--debug`` shows
the traceback. The error paths here never load a model (loading is patched to fail the test).
"""

from __future__ import annotations

import argparse
import importlib
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TORCH_FREE = ("treespec_sim.calibrate", "proofs_check.__main__")
MODULES = ("real_models.validate", "real_models.profile", "real_models.exittrain",
           "real_models.experiments", *TORCH_FREE)


def _module(name: str):
    if name not in TORCH_FREE:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    return importlib.import_module(name)


@pytest.fixture
def no_models(monkeypatch):
    """Loading or building a model fails the test: the error paths must not get that far."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import real_models.bundle
    import real_models.exittrain
    import real_models.experiments
    import real_models.profile

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded on an error path")

    monkeypatch.setattr(real_models.bundle, "load", refuse)
    monkeypatch.setattr(real_models.exittrain, "load", refuse)
    monkeypatch.setattr(real_models.experiments, "load", refuse)
    monkeypatch.setattr(real_models.profile, "build_random_bundle", refuse)


def _one_line_error(main, argv, capsys) -> str:
    try:
        rc = main(argv)
    except SystemExit as exc:  # argparse's own errors exit from parse_args
        rc = exc.code
    captured = capsys.readouterr()
    assert rc == 2, (argv, rc, captured.err)
    lines = captured.err.splitlines()
    assert len(lines) == 1, (argv, captured.err)
    assert "usage:" not in captured.err and "Traceback" not in captured.err
    return lines[0]


BAD = {
    "real_models.validate": [
        (["--device", "tpu"], "device must be 'cpu', 'cuda', 'cuda:N'"),
        (["--prompts", "0"], "argument --prompts: must be a positive integer; got 0"),
        (["--new-tokens", "-3"], "argument --new-tokens: must be a positive integer; got -3"),
        (["--temperature", "0"], "argument --temperature: must be finite and > 0"),
        (["--seed", "-1"], "argument --seed: must be a non-negative integer; got -1"),
        (["--prompts-file", "/no/such/prompts.json"], "--prompts-file /no/such/prompts.json"),
        (["--checks", "nope"], "argument --checks: invalid choice: 'nope'"),
        (["--dtype", "float8"], "argument --dtype: invalid choice"),
        (["--bogus"], "unrecognized arguments: --bogus"),
    ],
    "real_models.profile": [
        (["--device", "tpu"], "device must be"),
        (["--repeats", "0"], "argument --repeats: must be a positive integer; got 0"),
        (["--warmup", "-1"], "argument --warmup: must be a non-negative integer; got -1"),
        (["--threads", "0"], "argument --threads: must be a positive integer; got 0"),
        (["--tokens", "4", "2"], "--tokens must be increasing integers >= 1"),
        (["--contexts", "1", "8"], "--contexts must be increasing integers >= 2"),
        (["--time-budget", "0"], "argument --time-budget: must be finite and > 0"),
        (["--tokens", "0", "4"], "argument --tokens: must be a positive integer; got 0"),
        (["--small"], "--small scales down an --arch"),
        (["--arch", "qwen3-8b", "--target", "x"], "do not combine it with --target"),
        (["--arch", "qwen3-9b"], "argument --arch: invalid choice"),
    ],
    "real_models.exittrain": [
        ([], "the following arguments are required: COMMAND"),
        (["bogus"], "invalid choice: 'bogus'"),
        (["collect", "--out", "x.npz", "--seqs", "0"],
         "argument --seqs: must be a positive integer; got 0"),
        (["collect", "--out", "x.npz", "--threads", "0"],
         "argument --threads: must be a positive integer; got 0"),
        (["collect", "--out", "x.npz", "--prompt-len", "1"], "--prompt-len must be >= 2; got 1"),
        (["evaluate", "--drafters", "a=", "--val-skip", "-1"],
         "argument --val-skip: must be a non-negative integer; got -1"),
        (["finetune", "--data", "x", "--out-dir", "d", "--lr", "0"],
         "argument --lr: must be finite and > 0; got 0.0"),
        (["finetune", "--data", "x", "--out-dir", "d", "--tree-weight", "-1"],
         "--tree-weight must be >= 0.0; got -1.0"),
        (["tev-cost", "--temperature", "0"], "argument --temperature: must be finite and > 0"),
        (["train", "--data", "/no/such.npz", "--loss", "exit", "--out-dir", "d"],
         "--data /no/such.npz does not exist"),
        (["train", "--data", "x", "--loss", "best", "--out-dir", "d"],
         "argument --loss: invalid choice"),
        (["evaluate", "--drafters", "somedir"], "--drafters takes LABEL=DIR pairs"),
        (["evaluate", "--drafters", "a=", "a="], "label 'a' given twice"),
    ],
    "real_models.experiments": [
        ([], "the following arguments are required: COMMAND"),
        (["caddtree", "--grid", "0", "16"], "argument --grid: must be a positive integer; got 0"),
        (["caddtree", "--threads", "0"], "argument --threads: must be a positive integer"),
        (["caddtree", "--device", "tpu"], "device must be"),
        (["traces", "--out", "t.npz", "--temperature", "-1"],
         "argument --temperature: must be finite and >= 0"),
        (["simvsreal", "--traces", "t.npz", "--budgets", "4", "0"],
         "argument --budgets: must be a positive integer; got 0"),
        (["simvsreal", "--traces", "/no/such.npz"], "--traces /no/such.npz does not exist"),
    ],
    "treespec_sim.calibrate": [
        (["--regimes", "nope"], "unknown calibrated regime 'nope'"),
        (["--check", "--contexts", "0"], "--contexts must be >= 1; got 0"),
        (["--seed", "x"], "argument --seed: invalid int value: 'x'"),
        (["--workers", "0"], "argument --workers: must be a positive integer; got 0"),
    ],
    "proofs_check.__main__": [
        (["--size", "0"], "--size must be >= 1; got 0"),
        (["--only", "no-such-theorem"], "no check matches --only 'no-such-theorem'"),
        (["--size", "x"], "argument --size: invalid int value"),
    ],
}


@pytest.mark.parametrize("name", MODULES)
def test_bad_input_is_one_line_and_status_2(name, capsys, request, tmp_path, monkeypatch):
    mod = _module(name)
    if name not in TORCH_FREE:
        request.getfixturevalue("no_models")
    monkeypatch.chdir(tmp_path)  # nothing may be written, but if it were: not into the repo
    prog = mod.build_parser().prog
    for argv, expected in BAD[name]:
        line = _one_line_error(mod.main, argv, capsys)
        assert line.startswith(prog), (argv, line)
        assert ": error: " in line and expected in line, (argv, line)
    assert not list(tmp_path.iterdir())


def test_command_errors_name_the_command(capsys, no_models):
    from real_models import exittrain, experiments

    line = _one_line_error(exittrain.main, ["collect", "--out", "x", "--seqs", "0"], capsys)
    assert line.startswith("python -m real_models.exittrain collect: error: ")
    line = _one_line_error(experiments.main, ["simvsreal", "--traces", "/no.npz"], capsys)
    assert line.startswith("python -m real_models.experiments simvsreal: error: ")


def test_debug_shows_the_traceback(capsys, no_models):
    from real_models import validate

    with pytest.raises(ValueError, match="got 'tpu'"):
        validate.main(["--device", "tpu", "--debug"])
    from proofs_check.__main__ import main

    with pytest.raises(ValueError, match="--size"):
        main(["--size", "0", "--debug"])


def test_python_dash_m_prints_one_line():
    """The real entry points, as a new user runs them."""
    for argv, prog in ((["-m", "real_models.validate", "--device", "tpu"],
                        "python -m real_models.validate"),
                       (["-m", "proofs_check", "--size", "0"], "python -m proofs_check")):
        if argv[1].startswith("real_models"):
            pytest.importorskip("torch")
        out = subprocess.run([sys.executable, *argv], capture_output=True, text=True,
                             cwd=ROOT, timeout=120, check=False)
        assert out.returncode == 2, out.stderr
        assert out.stderr.splitlines() == [out.stderr.strip()]
        assert out.stderr.startswith(f"{prog}: error: "), out.stderr
        assert out.stdout == ""


# ------------------------------------------------------------------------------ --help
def _parsers(parser: argparse.ArgumentParser):
    yield parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                yield from _parsers(sub)


@pytest.mark.parametrize("name", MODULES)
def test_help_is_complete(name, capsys):
    mod = _module(name)
    top = mod.build_parser()
    assert top.prog == f"python -m {name.removesuffix('.__main__')}"
    assert top.description
    for parser in _parsers(top):
        text = parser.format_help()  # renders every %(default)s
        assert parser.description, parser.prog
        options = [a for a in parser._actions
                   if a.option_strings and not isinstance(a, argparse._HelpAction)]
        commands = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        assert options or commands, parser.prog
        for action in options:
            opt = action.option_strings[-1]
            assert action.help and action.help != argparse.SUPPRESS, (parser.prog, opt)
            assert opt in text, (parser.prog, opt)
            if action.nargs != 0:  # an option that takes a value says its default
                rendered = action.help % {**vars(action), "prog": parser.prog}
                assert "default" in rendered or "required" in rendered, (parser.prog, opt)
        # each option's line in --help has text (on its line or the next)
        lines = text.splitlines()
        for i, line in enumerate(lines):
            if line.startswith("  -"):
                head = line.strip()
                words = head.split("  ", 1)
                has_text = len(words) == 2 and words[1].strip()
                assert has_text or lines[i + 1].startswith(" " * 10), (parser.prog, line)
    # --help itself prints it and exits 0
    with pytest.raises(SystemExit) as exc:
        mod.main(["--help"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.startswith(f"usage: {top.prog}")


def test_validate_help_lists_defaults():
    mod = _module("real_models.validate")
    text = " ".join(mod.build_parser().format_help().split())
    for phrase in ("--device DEVICE 'cpu', 'cuda', 'cuda:N' or 'mps' (default: cpu)",
                   "(default: 1.0)", "--seed SEED", "(default: 0)", "the shipped tiny target",
                   "exit status: 0 every check passed, 1 a check failed, 2 bad input"):
        assert phrase in text, phrase


# ------------------------------------------------------------------------------ devices
def test_load_checks_the_device_first():
    torch = pytest.importorskip("torch")
    pytest.importorskip("transformers")
    import real_models
    from real_models.bundle import check_device

    with pytest.raises(ValueError, match=r"device must be 'cpu', 'cuda', 'cuda:N' .*got 'tpu'"):
        real_models.load(device="tpu")
    # before anything else: a missing directory is not what it reports
    with pytest.raises(ValueError, match="got 'tpu'"):
        real_models.load("/no/such/target", device="tpu")
    with pytest.raises(ValueError, match="available here: 'cpu'"):
        check_device("cuda:x")
    with pytest.raises(ValueError, match="got 3"):
        check_device(3)
    assert check_device("cpu") == torch.device("cpu")
    if torch.cuda.is_available():
        n = torch.cuda.device_count()
        assert check_device("cuda").type == "cuda"
        with pytest.raises(ValueError, match=f"{n} CUDA device"):
            check_device(f"cuda:{n}")
    else:
        with pytest.raises(ValueError, match="CUDA is not available on this machine"):
            real_models.load(device="cuda")
        with pytest.raises(ValueError, match="CUDA is not available"):
            check_device("cuda:0")
