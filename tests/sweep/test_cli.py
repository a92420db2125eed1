"""The shared command-line options (``treespec_sim.cli``): value types that reject a bad number
as it is parsed, in one line naming the option, and one helper per shared option.

Nothing here runs a sweep, a check or a model: parsing stops at the first bad value (or at
``--help``) before an entry point's body starts.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from treespec_sim import cli
from treespec_sim.validation import check_nonnegative_int, check_positive_int, check_temperature

ROOT = Path(__file__).resolve().parents[2]
TORCH_FREE = ("treespec_sim.sweep", "treespec_sim.calibrate", "treespec_sim.report",
              "treespec_sim.acceptance", "treespec_sim.export",
              "proofs_check.__main__", "bench_batch_caddtree", "bench_caddtree",
              "bench_sampled_fill", "bench_sweep",
              "bench_verification", "bench_verifiers")
#: Every entry point and its ``prog`` (the benchmarks as scripts, the rest with ``-m``).
ENTRY_POINTS = {
    "treespec_sim.sweep": "python -m treespec_sim.sweep",
    "treespec_sim.calibrate": "python -m treespec_sim.calibrate",
    "treespec_sim.report": "python -m treespec_sim.report",
    "treespec_sim.acceptance": "python -m treespec_sim.acceptance",
    "treespec_sim.export": "python -m treespec_sim.export",
    "proofs_check.__main__": "python -m proofs_check",
    "real_models.validate": "python -m real_models.validate",
    "real_models.profile": "python -m real_models.profile",
    "real_models.experiments": "python -m real_models.experiments",
    "real_models.exittrain": "python -m real_models.exittrain",
    "real_models.train": "python -m real_models.train",
    "real_models.record": "python -m real_models.record",
    **{f"bench_{b}": f"python benchmarks/bench_{b}.py"
       for b in ("batch_caddtree", "caddtree", "ddtree", "real_models", "sampled_fill", "sweep",
                 "verification", "verifiers")},
}
#: The entry points whose parsers take their shared options from ``treespec_sim.cli``.
CONVERTED = list(ENTRY_POINTS)


def _module(name: str, monkeypatch):
    if name not in TORCH_FREE:
        pytest.importorskip("torch")
        pytest.importorskip("transformers")
    if name.startswith("bench_"):  # the benchmarks run as scripts, from their folder
        monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    return importlib.import_module(name)


def _commands(parser: argparse.ArgumentParser, prefix=()):
    """``(argv prefix, parser)`` for the parser and each of its subcommands."""
    yield list(prefix), parser
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from _commands(sub, (*prefix, name))


def _error_line(parse, argv, capsys) -> str:
    with pytest.raises(SystemExit) as exc:
        parse(argv)
    captured = capsys.readouterr()
    assert exc.value.code == 2, (argv, captured.err)
    lines = captured.err.splitlines()
    assert len(lines) == 1 and "usage:" not in captured.err, (argv, captured.err)
    assert captured.out == ""
    return lines[0]


# ------------------------------------------------------------------------------ value types
ACCEPT = {
    cli.positive_int: [("1", 1), ("7", 7), ("+3", 3), (" 12 ", 12), ("1_000", 1000)],
    cli.nonnegative_int: [("0", 0), ("5", 5)],
    cli.positive_float: [("0.5", 0.5), ("3", 3.0), ("1e-3", 1e-3)],
    cli.temperature: [("0", 0.0), ("1.5", 1.5), ("0.6", 0.6)],
    cli.positive_temperature: [("1", 1.0), ("0.6", 0.6), ("1e-9", 1e-9)],
}
REJECT = {
    cli.positive_int: [("0", "must be a positive integer; got 0"),
                       ("-3", "must be a positive integer; got -3"),
                       ("x", "invalid int value: 'x'"), ("1.5", "invalid int value: '1.5'"),
                       ("", "invalid int value: ''")],
    cli.nonnegative_int: [("-1", "must be a non-negative integer; got -1"),
                          ("2.0", "invalid int value: '2.0'")],
    cli.positive_float: [("0", "must be finite and > 0; got 0.0"),
                         ("-2", "must be finite and > 0; got -2.0"),
                         ("nan", "must be finite and > 0; got nan"),
                         ("inf", "must be finite and > 0; got inf"),
                         ("fast", "invalid float value: 'fast'")],
    cli.temperature: [("-0.1", "must be finite and >= 0 (0 = greedy); got -0.1"),
                      ("nan", "must be finite and >= 0"), ("-inf", "must be finite and >= 0"),
                      ("hot", "invalid float value: 'hot'")],
    cli.positive_temperature: [("0", "must be finite and > 0; got 0.0"),
                               ("-1", "must be finite and > 0")],
}


@pytest.mark.parametrize("kind", list(ACCEPT), ids=lambda f: f.__name__)
def test_value_types_accept_and_convert(kind):
    for text, value in ACCEPT[kind]:
        got = kind(text)
        assert got == value and type(got) is type(value), (kind.__name__, text, got)


@pytest.mark.parametrize("kind", list(REJECT), ids=lambda f: f.__name__)
def test_value_types_reject_in_one_line_naming_the_option(kind, capsys):
    parser = cli.OneLineParser(prog="prog")
    parser.add_argument("--value", type=kind)
    for text, message in REJECT[kind]:
        with pytest.raises(argparse.ArgumentTypeError, match="^" + re.escape(message)):
            kind(text)
        line = _error_line(parser.parse_args, [f"--value={text}"], capsys)
        assert line.startswith(f"prog: error: argument --value: {message}"), line


def test_the_messages_are_validations():
    """The types say what ``treespec_sim.validation`` says (less the name, which argparse
    puts first), so a command line and a function call reject a value in the same words."""
    def message(check, value, **kwargs) -> str:
        with pytest.raises(ValueError) as exc:
            check(value, "NAME", **kwargs)
        assert str(exc.value).startswith("NAME ")
        return str(exc.value).removeprefix("NAME ")

    def parse_error(kind, text) -> str:
        with pytest.raises(argparse.ArgumentTypeError) as exc:
            kind(text)
        return str(exc.value)

    assert parse_error(cli.positive_int, "0") == message(check_positive_int, 0)
    assert parse_error(cli.nonnegative_int, "-4") == message(check_nonnegative_int, -4)
    assert parse_error(cli.temperature, "-1") == message(check_temperature, -1.0)
    assert parse_error(cli.positive_temperature, "0") == message(check_temperature, 0.0,
                                                                 positive=True)
    assert parse_error(cli.positive_float, "0") == message(check_temperature, 0.0, positive=True)


# ------------------------------------------------------------------------------ helpers
def test_helpers_add_the_shared_options():
    parser = cli.OneLineParser(prog="prog")
    cli.add_out(parser, "where", metavar="DIR")
    cli.add_seed(parser, "seed (default: %(default)s)")
    cli.add_device(parser)
    cli.add_dtype(parser, ("float32", "bfloat16"), "dtype (default: the checkpoint's)")
    cli.add_threads(parser)
    cli.add_checkpoints(parser)
    cli.add_temperature(parser, default=0.0, help="T (default: %(default)s)")
    cli.add_prompts(parser, default=32)
    cli.add_new_tokens(parser, default=96)
    cli.add_repeats(parser, default=3)
    cli.add_budgets(parser, default=(4, 8))
    cli.add_json_flag(parser)
    cli.add_debug(parser)
    defaults = vars(parser.parse_args([]))
    assert defaults == {"out": None, "seed": 0, "device": "cpu", "dtype": None, "threads": 1,
                        "target": None, "drafter": None, "temperature": 0.0, "prompts": 32,
                        "new_tokens": 96, "repeats": 3, "budgets": [4, 8], "json": False,
                        "debug": False}
    args = parser.parse_args(["--out", "o", "--seed", "5", "--device", "cuda:1", "--dtype",
                              "bfloat16", "--threads", "2", "--target", "t", "--drafter", "d",
                              "--temperature", "0.7", "--prompts", "3", "--new-tokens", "8",
                              "--repeats", "9", "--budgets", "16", "64", "--json"])
    assert (args.out, args.target, args.drafter) == (Path("o"), Path("t"), Path("d"))
    assert (args.seed, args.threads, args.prompts, args.new_tokens, args.repeats) == (
        5, 2, 3, 8, 9)
    assert (args.device, args.dtype, args.temperature, args.budgets, args.json) == (
        "cuda:1", "bfloat16", 0.7, [16, 64], True)
    text = parser.format_help()
    assert "(default: cpu)" in text and "(default: 32)" in text and "(default: 96)" in text


def test_helpers_take_the_callers_defaults():
    parser = cli.OneLineParser(prog="prog")
    cli.add_seed(parser, default=None)
    cli.add_out(parser, "required here", required=True)
    cli.add_temperature(parser, default=1.0, help="T > 0", positive=True)
    assert parser.parse_args(["--out", "x"]).seed is None
    assert parser.parse_args(["--out", "x"]).temperature == 1.0
    with pytest.raises(SystemExit):
        parser.parse_args([])  # --out is required
    with pytest.raises(SystemExit):
        parser.parse_args(["--out", "x", "--temperature", "0"])


ADDERS = {
    "--seed": cli.add_seed, "--threads": cli.add_threads,
    "--prompts": lambda p: cli.add_prompts(p, default=1),
    "--new-tokens": lambda p: cli.add_new_tokens(p, default=1),
    "--repeats": lambda p: cli.add_repeats(p, default=1),
    "--budgets": lambda p: cli.add_budgets(p, default=[1]),
    "--temperature": lambda p: cli.add_temperature(p, default=0.0, help="T"),
}


@pytest.mark.parametrize("option,argv,message", [
    ("--seed", ["--seed", "-1"], "must be a non-negative integer; got -1"),
    ("--threads", ["--threads", "0"], "must be a positive integer; got 0"),
    ("--prompts", ["--prompts", "-3"], "must be a positive integer; got -3"),
    ("--new-tokens", ["--new-tokens", "0"], "must be a positive integer; got 0"),
    ("--repeats", ["--repeats", "0"], "must be a positive integer; got 0"),
    ("--budgets", ["--budgets", "8", "0"], "must be a positive integer; got 0"),
    ("--temperature", ["--temperature", "-1"], "must be finite and >= 0 (0 = greedy); got -1.0"),
])
def test_helper_options_reject_bad_numbers(option, argv, message, capsys):
    parser = cli.OneLineParser(prog="prog")
    ADDERS[option](parser)
    line = _error_line(parser.parse_args, argv, capsys)
    assert line == f"prog: error: argument {option}: {message}", line


# ------------------------------------------------------------------------------ entry points
def test_sweep_workers_0_fails_in_one_line_before_anything_runs(tmp_path):
    """As a user runs it: exit status 2, one line naming --workers, nothing written."""
    env = {**os.environ, "PYTHONPATH": str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run([sys.executable, "-m", "treespec_sim.sweep", "--workers", "0",
                          "--out", str(tmp_path / "run")], capture_output=True, text=True,
                         cwd=tmp_path, env=env, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert out.stderr == ("python -m treespec_sim.sweep: error: argument --workers: must be a "
                          "positive integer; got 0\n")
    assert out.stdout == ""
    assert not list(tmp_path.iterdir())  # no run folder, no runs/


def test_in_process_mains_reject_bad_numbers(capsys):
    from proofs_check.__main__ import main as proofs_main
    from treespec_sim.calibrate import main as calibrate_main
    from treespec_sim.sweep import main as sweep_main

    for main, argv, prog, option in (
            (sweep_main, ["--workers", "0"], "python -m treespec_sim.sweep", "--workers"),
            (sweep_main, ["--rounds", "-2"], "python -m treespec_sim.sweep", "--rounds"),
            (sweep_main, ["--seed", "-1"], "python -m treespec_sim.sweep", "--seed"),
            (calibrate_main, ["--workers", "-1"], "python -m treespec_sim.calibrate",
             "--workers"),
            (proofs_main, ["--seed", "-5"], "python -m proofs_check", "--seed")):
        line = _error_line(main, argv, capsys)
        assert line.startswith(f"{prog}: error: argument {option}: must be "), line


@pytest.mark.parametrize("name", list(ENTRY_POINTS))
def test_help_of_every_entry_point(name, monkeypatch, capsys):
    """``--help`` (and each command's) prints its usage and exits 0, without running."""
    mod = _module(name, monkeypatch)
    top = mod.build_parser()
    assert top.prog == ENTRY_POINTS[name]
    for prefix, parser in _commands(top):
        with pytest.raises(SystemExit) as exc:
            mod.main([*prefix, "--help"])
        assert exc.value.code == 0, prefix
        out = capsys.readouterr().out
        assert out.startswith(f"usage: {parser.prog}"), (prefix, out[:200])
        for action in parser._actions:
            for opt in action.option_strings:
                assert opt in out, (prefix, opt)


#: The type each shared option has wherever it appears.
SHARED_TYPES = {"--seed": cli.nonnegative_int, "--threads": cli.positive_int,
                "--workers": cli.positive_int, "--prompts": cli.positive_int,
                "--new-tokens": cli.positive_int, "--repeats": cli.positive_int,
                "--budgets": cli.positive_int, "--out": Path, "--target": Path,
                "--drafter": Path}
#: Entry points where a shared name means something else, with what it is there: the acceptance
#: commands' ``--drafter`` is the drafter's kind that wrote a log (issue 45), not a checkpoint.
OTHER_MEANING = {("treespec_sim.acceptance", "--drafter"), ("treespec_sim.calibrate", "--drafter"),
                 ("treespec_sim.export", "--drafter")}
#: A value each of the package's types rejects.
BAD = {cli.positive_int: "0", cli.nonnegative_int: "-1", cli.positive_float: "0",
       cli.temperature: "-1", cli.positive_temperature: "0"}


@pytest.mark.parametrize("name", CONVERTED)
def test_entry_points_check_every_number_as_it_is_parsed(name, monkeypatch, capsys):
    """Each option of a shared name has the shared type, and every option typed by
    ``treespec_sim.cli`` rejects a bad value at parse time, in one line naming it."""
    mod = _module(name, monkeypatch)
    checked = 0
    for prefix, parser in _commands(mod.build_parser()):
        for action in parser._actions:
            if not action.option_strings:
                continue
            opt = action.option_strings[-1]
            if (name, opt) in OTHER_MEANING:
                assert action.choices == ["block-diffusion", "autoregressive"], (name, opt)
            elif opt in SHARED_TYPES:
                assert action.type is SHARED_TYPES[opt], (name, prefix, opt, action.type)
            if opt == "--temperature":
                assert action.type in (cli.temperature, cli.positive_temperature), (name, opt)
            if action.type in BAD:
                line = _error_line(mod.main, [*prefix, opt, BAD[action.type]], capsys)
                # argparse names every spelling of an option (--log-temperature/--temperature)
                spelled = "/".join(action.option_strings)
                assert line.startswith(f"{parser.prog}: error: argument {spelled}: "), line
                checked += 1
            assert action.type is not int or opt in INT_ON_PURPOSE.get(name, ()), (
                name, prefix, opt, "an integer option without a range check")
    assert checked >= 1 or name == "treespec_sim.report", name  # report takes no number


#: Integer options left as ``type=int``: their range is checked by the entry point's body,
#: whose message (and exit through ``return 2``) other tests pin.
INT_ON_PURPOSE = {
    "treespec_sim.sweep": ("--worlds",),         # the grid's check: tests/test_sweep.py
    "treespec_sim.calibrate": ("--contexts",),   # tests/test_calibrate.py
    "proofs_check.__main__": ("--size",),        # tests/test_proofs_check_cli.py
    "real_models.profile": ("--contexts",),      # increasing integers >= 2, checked together
    "real_models.exittrain": ("--prompt-len",),  # >= 2: tests/sweep/test_cli_errors.py
}
