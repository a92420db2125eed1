"""Runs are never lost or silently replaced; errors are one clear line (issue 17)."""

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from treespec_sim.families import DDTreeGrid
from treespec_sim.sweep import LOCK_NAME, Plan, main

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


@pytest.mark.parametrize("text", ['{"rows": [\x01',           # not JSON
                                  '[{"regime": "tiny"}]',      # not the family's rows
                                  '[{"map": true}]'])          # a field its rows do not have
def test_a_corrupted_cell_is_named_set_aside_and_recomputed(tmp_path, capsys, text):
    out = tmp_path / "run"
    assert _run(out) == 0
    rows_before = (out / "results.csv").read_text()
    cell = sorted((out / "cells").rglob("*.json"))[0]
    cell.write_text(text)
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
    assert "ddtree.temperatures must be a real number >= 0; got 'hot' (str)" in err
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
    from treespec_sim.sweep_store import plan_record as _plan_record

    plan = Plan((DDTreeGrid(("tiny",), temperatures=(0.0, 0.6)),))
    assert _plan_record(plan) == json.loads(json.dumps(_plan_record(plan)))


# ------------------------------------------------------------------ the lock on --out
def _exited_pid() -> int:
    """The pid of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def _write_lock(out, **holder):
    out.mkdir(parents=True, exist_ok=True)
    (out / LOCK_NAME).write_text(json.dumps(holder))


def test_a_stale_lock_is_named_and_taken_over(tmp_path, capsys):
    out = tmp_path / "run"
    dead = _exited_pid()
    _write_lock(out, pid=dead, host=socket.gethostname(), started="2026-01-01T00:00:00")
    assert _run(out) == 0
    err = capsys.readouterr().err
    assert f"held the lock of pid {dead} on host {socket.gethostname()}" in err
    assert "no longer running: a stale lock, taken over" in err
    assert (out / "run.json").exists() and not (out / LOCK_NAME).exists()  # released after
    # an unreadable lock file (a sweep killed while writing it) is stale too
    other = tmp_path / "other"
    other.mkdir()
    (other / LOCK_NAME).write_text('{"pid": 12')
    assert _run(other) == 0
    assert "an unreadable lock ('{\"pid\": 12')" in capsys.readouterr().err


def test_a_lock_whose_process_still_runs_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        _write_lock(out, pid=sleeper.pid, host=socket.gethostname(), started="x")
        before = _snapshot(out)
        assert _run(out) == 2
        err = capsys.readouterr().err
        assert f"in use by a running sweep (pid {sleeper.pid} on host" in err
        assert "delete the lock file" in err and len(err.strip().splitlines()) == 1
        assert _snapshot(out) == before  # nothing written, the lock left alone
    finally:
        sleeper.kill()
        sleeper.wait()
    _write_lock(out, pid=1, host="elsewhere.example", started="x")
    assert _run(out) == 2
    err = capsys.readouterr().err
    assert "locked by another sweep (pid 1 on host elsewhere.example" in err
    assert f"cannot be checked from host {socket.gethostname()}" in err


def _slow_config(tmp_path, rounds=300):
    """A grid whose first cells (regime 'tiny') finish at once and whose others take long."""
    config = tmp_path / "slow.toml"
    config.write_text('[ddtree]\nregimes = ["tiny", "math500", "alpaca", "gsm8k"]\n'
                      f'budgets = [16, 256]\ntemperatures = [0.0, 1.0]\nrounds = {rounds}\n'
                      'worlds = 1\n')
    return config


def _sweep_cmd(config, out, *extra):
    return [sys.executable, "-m", "treespec_sim.sweep", "--config", str(config), "--out",
            str(out), "--quiet", "--no-plot", *extra]


def _wait_for(predicate, timeout=120.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    return False


def _cells(out):
    return {p: p.stat().st_mtime_ns for p in out.rglob("cells/**/*.json")}


def test_a_second_sweep_into_a_running_sweeps_out_is_refused(tmp_path):
    out = tmp_path / "run"
    config = _slow_config(tmp_path)
    first = subprocess.Popen(_sweep_cmd(config, out), stderr=subprocess.DEVNULL,
                             preexec_fn=_sigint_as_default)
    try:
        assert _wait_for(lambda: _cells(out)), "the first sweep finished no cell"
        for extra in ((), ("--resume",)):
            second = subprocess.run(_sweep_cmd(config, out, *extra), capture_output=True,
                                    text=True, timeout=120)
            assert second.returncode == 2, second.stderr
            assert f"is in use by a running sweep (pid {first.pid} on host " \
                   f"{socket.gethostname()}" in second.stderr
        holder = json.loads((out / LOCK_NAME).read_text())
        assert holder["pid"] == first.pid and holder["host"] == socket.gethostname()
        assert first.poll() is None  # the first one runs on, untouched
    finally:
        first.send_signal(signal.SIGINT)
        first.wait(60)


def test_two_sweeps_started_together_into_one_empty_out(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    config = tmp_path / "grid.toml"
    config.write_text('[ddtree]\nregimes = ["tiny", "small"]\nbudgets = [4, 16]\n'
                      'temperatures = [0.0, 0.5, 1.0]\nrounds = 400\n')
    procs = [subprocess.Popen(_sweep_cmd(config, out), stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    results = [(p.wait(300), p.stderr.read()) for p in procs]
    assert sorted(rc for rc, _ in results) == [0, 2], results  # one computes, one is refused
    err = next(e for rc, e in results if rc == 2)
    assert "in use by a running sweep" in err or "holds a finished run" in err
    assert json.loads((out / "run.json").read_text())["cells_skipped_on_resume"] == 0


# ------------------------------------------------------------------ Ctrl-C
def _sigint_as_default() -> None:
    """In the child before exec: SIGINT back to its default. A suite started in the background
    by a non-interactive shell runs with SIGINT ignored, which a child inherits, and Python
    then installs no KeyboardInterrupt handler: the sweep would never see the Ctrl-C sent."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _children(pid: int) -> set[int]:
    """Live child processes of ``pid`` (from /proc)."""
    kids = set()
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and fields[0] != "Z":
            kids.add(int(stat_file.parent.name))
    return kids


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("workers", [1, 2])
def test_ctrl_c_stops_at_once_and_keeps_every_finished_cell(tmp_path, workers):
    out = tmp_path / "run"
    proc = subprocess.Popen(_sweep_cmd(_slow_config(tmp_path), out, "--workers", str(workers)),
                            stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_as_default)
    try:
        assert _wait_for(lambda: _cells(out)), "no cell finished"
        kids = _children(proc.pid) if workers > 1 else set()
        assert workers == 1 or kids, "no worker processes found"
        finished = _cells(out)
        start = time.monotonic()
        proc.send_signal(signal.SIGINT)
        rc = proc.wait(60)
        took = time.monotonic() - start
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert rc == 130 and took < 2.0, (rc, took)
    assert "interrupted; finished cells are saved" in proc.stderr.read()
    assert not any(_alive(k) for k in kids)  # the workers are gone, not left computing
    now = _cells(out)
    assert all(now.get(p) == t for p, t in finished.items())  # every finished cell kept
    assert not list(out.rglob("cells/**/.*.tmp")) and not (out / LOCK_NAME).exists()
    for p in now:
        assert json.loads(p.read_text())  # whole files, ready for --resume


def test_quiet_prints_only_the_output_folder(tmp_path, capsys):
    out = tmp_path / "run"
    assert main([*ARGS, "--out", str(out), "--no-plot"]) == 0
    assert capsys.readouterr().out == f"wrote {out}\n"
