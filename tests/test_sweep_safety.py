"""Runs are never lost or silently replaced; errors are one clear line (issue 17)."""

import json
import os
import stat

import pytest

from treespec_sim.families import DDTreeGrid
from treespec_sim.sweep import Plan, main

ARGS = ["--preset", "quick", "--regimes", "tiny", "--rounds", "3", "--quiet"]


def _run(out, *extra):
    return main([*ARGS, "--out", str(out), *extra])


def _numbers_text(text):
    """results.csv without its wall-clock column."""
    lines = [line.split(",") for line in text.splitlines()]
    drop = lines[0].index("wall_s")
    return [[x for i, x in enumerate(row) if i != drop] for row in lines]


def _numbers(path):
    return _numbers_text(path.read_text())


def _snapshot(folder):
    return {p.relative_to(folder): (p.read_bytes(), p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def test_another_run_in_out_is_refused_and_left_intact(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(out) == 0
    before = _snapshot(out)
    capsys.readouterr()
    # other settings (here: one world per regime instead of 3), with or without --resume
    assert main([*ARGS, "--worlds", "1", "--out", str(out)]) == 2
    assert main([*ARGS, "--worlds", "1", "--out", str(out), "--resume"]) == 2
    err = capsys.readouterr().err
    assert "holds a finished run (preset 'quick'" in err and "other settings" in err
    assert "usage:" not in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 2  # one line per refusal
    # the same settings without --resume: refused too (it would replace the run)
    assert _run(out) == 2
    assert "pass --resume" in capsys.readouterr().err
    assert _snapshot(out) == before
    # the same settings with --resume: reused, nothing recomputed
    assert _run(out, "--resume") == 0
    record = json.loads((out / "run.json").read_text())
    assert record["cells_skipped_on_resume"] == record["cells"] > 0


def test_out_that_is_a_file_is_refused_before_any_work(tmp_path, capsys, monkeypatch):
    import treespec_sim.sweep as sweep

    calls = []
    monkeypatch.setattr(sweep, "run_cell", lambda *a: calls.append(a))
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    assert _run(target) == 2
    assert "is a file, not a folder" in capsys.readouterr().err
    assert calls == [] and target.read_text() == "mine"


def test_a_corrupted_cell_is_named_set_aside_and_recomputed(tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(out) == 0
    rows_before = (out / "results.csv").read_text()
    cell = sorted((out / "cells").rglob("*.json"))[0]
    cell.write_text('{"rows": [\x01')
    (out / "run.json").unlink()  # an interrupted run, resumed
    capsys.readouterr()
    assert _run(out, "--resume") == 0
    err = capsys.readouterr().err
    assert f"cell file {cell} is corrupted" in err and "recomputed" in err
    assert cell.with_name(cell.name + ".corrupt").exists()
    assert json.loads(cell.read_text())  # rewritten
    assert _numbers(out / "results.csv") == _numbers_text(rows_before)  # same numbers


def test_no_figures_of_an_earlier_run_are_left_beside_new_results(tmp_path):
    out = tmp_path / "run"
    assert main([*ARGS[:-1], "--out", str(out), "--quiet"]) == 0
    figures = json.loads((out / "run.json").read_text())["figures"]
    assert figures and all((out / f).exists() for f in figures)
    assert _run(out, "--resume", "--no-plot") == 0
    assert not list(out.glob("*.png"))
    assert json.loads((out / "run.json").read_text())["figures"] == []


def test_files_have_the_users_normal_permissions(tmp_path):
    out = tmp_path / "run"
    mask = os.umask(0o022)
    try:
        assert _run(out) == 0
    finally:
        os.umask(mask)
    for p in [*out.rglob("*.json"), out / "results.csv", out / "summary.md"]:
        assert stat.S_IMODE(p.stat().st_mode) == 0o644, p


def test_more_worlds_than_rounds_is_one_line_naming_both(tmp_path, capsys):
    assert main([*ARGS, "--worlds", "4", "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert "worlds must be at most" in err and "got worlds=4, rounds=3" in err
    assert len(err.strip().splitlines()) == 1
    assert not (tmp_path / "o").exists()


def test_bad_config_value_names_the_key(tmp_path, capsys):
    cfg = tmp_path / "grid.toml"
    cfg.write_text('[ddtree]\nregimes = ["tiny"]\ntemperatures = ["hot"]\n')
    assert main(["--config", str(cfg), "--out", str(tmp_path / "o"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "ddtree.temperatures: 'hot' is not a number" in err
    assert len(err.strip().splitlines()) == 1


def test_unreachable_scheduler_fails_fast_naming_the_address(tmp_path, capsys, monkeypatch):
    pytest.importorskip("distributed")
    import treespec_sim.sweep as sweep

    monkeypatch.setattr(sweep, "SCHEDULER_TIMEOUT_S", 2)
    address = "tcp://127.0.0.1:9"  # the discard port: nothing listens there
    assert _run(tmp_path / "o", "--scheduler", address) == 2
    err = capsys.readouterr().err
    assert f"cannot reach a dask scheduler at {address}" in err
    assert "Traceback" not in err


def test_debug_shows_the_traceback(tmp_path):
    target = tmp_path / "file"
    target.write_text("")
    with pytest.raises(ValueError, match="is a file"):
        _run(target, "--debug")


def test_plan_records_compare_equal_after_a_round_trip(tmp_path):
    from treespec_sim.sweep import _plan_record

    plan = Plan((DDTreeGrid(("tiny",), temperatures=(0.0, 0.6)),))
    assert _plan_record(plan) == json.loads(json.dumps(_plan_record(plan)))
