"""The sweep: plans, config validation, outputs, resume (also after a kill), workers, dask."""

import csv
import dataclasses
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from treespec_sim.families import (
    COLUMNS,
    CaDDTreeGrid,
    DDTreeGrid,
    StochasticGrid,
    VerifierGrid,
)
from treespec_sim.sweep import PRESETS, Plan, load_config, main, plan_from_dict, run_plan


def small_plan(seed: int = 0) -> Plan:
    return Plan((
        DDTreeGrid(("tiny", "small"), budgets=(2, 4), temperatures=(0.0, 1.0), rounds=6),
        CaDDTreeGrid(("small",), rounds=6, max_budget=32),
        StochasticGrid(("small",), budgets=(4,), temperatures=(0.0, 1.0), rounds=4),
        VerifierGrid(("small",), shapes=("2x2",), rounds=4),
    ), seed=seed)


def _numbers(rows):
    return [(r.family, r.regime, r.method, r.temperature, r.budget,
             r.cost_model, r.tau_mean, r.throughput_tok_s, r.worlds,
             tuple(r.tau_world_means), r.tau_world_ci_low, r.tau_world_ci_high,
             tuple(r.get("rel_world_means", ()))) for r in rows]


@pytest.mark.parametrize("data, match", [
    ({"sed": 1, "ddtree": {"regimes": ["tiny"]}}, "unknown key 'sed'"),
    ({"ddtree": {"regimes": ["tiny"], "budget": [4]}}, r"unknown key ddtree\.'budget'"),
    ({"ddtree": {"regimes": ["chatty"]}}, "ddtree.regimes: unknown regime 'chatty'"),
    ({"ddtree": {"regimes": ["tiny"], "methods": ["bfs"]}}, "ddtree.methods: unknown method"),
    ({"caddtree": {"regimes": ["tiny"], "cost_models": ["tpu"]}},
     "caddtree.cost_models: unknown cost model 'tpu'"),
    ({"stochastic": {"regimes": ["tiny"], "drafters": ["great"]}}, "unknown drafter 'great'"),
    ({"verifiers": {"regimes": ["tiny"], "shapes": ["2by2"]}}, "not a verifier tree: WIDTHxDEPTH"),
    ({"ddtree": {"budgets": [4]}}, "needs 'regimes'"),
    ({"ddtree": {"regimes": ["tiny"], "rounds": 1}}, "ddtree.rounds must be an integer >= 2"),
    ({"ddtree": {"regimes": ["tiny"]}, "cost_model": "tpu"}, "cost_model: unknown cost model"),
    ({"ddtree": 3}, r"\[ddtree\] must be a table"),
    ({"seed": 0}, "no family table"),
    ({"ddtree": {"regimes": ["tiny"], "worlds": 0}}, "ddtree.worlds must be an integer >= 1"),
    ({"caddtree": {"regimes": ["tiny"], "worlds": 1.5}}, "caddtree.worlds must be an integer"),
    ({"stochastic": {"regimes": ["tiny"], "worlds": True}}, "stochastic.worlds must be an int"),
    ({"verifiers": {"regimes": ["tiny"], "rounds": 4, "worlds": 5}},
     r"verifiers.worlds must be at most verifiers.rounds .* got worlds=5, rounds=4"),
])
def test_config_errors_name_the_key(data, match):
    with pytest.raises(ValueError, match=match):
        plan_from_dict(data)


def test_config_file_and_preset_override(tmp_path):
    path = tmp_path / "grid.toml"
    path.write_text('seed = 3\npreset = "quick"\n[ddtree]\nregimes = ["tiny"]\nrounds = 4\n')
    plan = load_config(path)
    assert plan.seed == 3
    dd = next(g for g in plan.grids if g.family == "ddtree")
    assert dd.regimes == ("tiny",) and dd.rounds == 4
    assert {g.family for g in plan.grids} == {"ddtree", "caddtree", "stochastic", "verifiers"}
    bad = tmp_path / "bad.toml"
    bad.write_text("[ddtree\n")
    with pytest.raises(ValueError, match="not valid TOML"):
        load_config(bad)


def test_outputs_and_resume_after_deleting_a_cell(tmp_path):
    plan = small_plan()
    rows = run_plan(plan, tmp_path, progress=False)
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert tuple(header) == COLUMNS
    for col in ("regime", "method", "verifier", "temperature", "budget", "cost_model", "rounds",
                "seed", "tau_mean", "tau_ci_low", "tau_ci_high", "tree_size_mean",
                "coverage_mean", "round_time_s", "throughput_tok_s", "speedup_vs_ar", "worlds",
                "tau_world_means", "tau_world_ci_low", "tau_world_ci_high", "rel_world_means",
                "rel_world_ci_low", "rel_world_ci_high"):
        assert col in header
    with open(tmp_path / "results.csv", newline="") as fh:
        table = list(csv.DictReader(fh))
    assert len(table) == len(rows)
    for r, line in zip(rows, table, strict=True):  # list columns are ';'-joined
        assert int(line["worlds"]) == r.worlds == 3
        assert [float(x) for x in line["tau_world_means"].split(";")] == \
            pytest.approx(r.tau_world_means, rel=1e-5)
        if r.family in ("caddtree", "verifiers"):
            assert len(line["rel_world_means"].split(";")) == 3
            assert float(line["rel_world_ci_low"]) <= float(line["rel_world_ci_high"])
        else:
            assert line["rel_world_means"] == ""
    methods = {r.method for r in rows}
    for m in ("chain", "ddtree", "ddtree-oracle", "caddtree", "sampled-chain", "tsubame-rrsw"):
        assert m in methods
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["plan"]["ddtree"]["regimes"] == ["tiny", "small"]
    assert "numpy" in record["versions"] and record["git_commit"]
    assert any(c["name"] == "a800-qwen3-8b" and "CaDDTree" in c["provenance"]
               for c in record["cost_models"])
    for fig in record["figures"]:
        assert (tmp_path / fig).stat().st_size > 1000
    assert len(record["figures"]) == 6  # caddtree draws two
    summary = (tmp_path / "summary.md").read_text()
    for heading in ("DDTree across budgets", "oracle budget", "Tsubame", "over RRSw"):
        assert heading in summary
    cells = sorted((tmp_path / "cells").rglob("*.json"))
    assert len(cells) == len(plan.cells())
    victim = cells[0]
    before = json.loads(victim.read_text())
    victim.unlink()
    mtimes = {p: p.stat().st_mtime_ns for p in cells[1:]}
    rows2 = run_plan(plan, tmp_path, resume=True, progress=False, plot=False)
    assert json.loads((tmp_path / "run.json").read_text())["cells_skipped_on_resume"] == \
        len(cells) - 1
    after = json.loads(victim.read_text())
    strip = lambda rs: [{k: v for k, v in r.items() if k != "wall_s"} for r in rs]  # noqa: E731
    assert strip(after) == strip(before)
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())
    assert _numbers(rows2) == _numbers(rows)


def test_resume_redoes_cells_whose_settings_changed(tmp_path):
    grid = DDTreeGrid(("tiny", "small"), budgets=(2, 4), temperatures=(0.0,), rounds=6)
    run_plan(Plan((grid,)), tmp_path, progress=False, plot=False)
    more = dataclasses.replace(grid, rounds=8)
    # a finished run of other settings is never replaced, not even with --resume
    with pytest.raises(ValueError, match=r"holds a finished run .* with other settings"):
        run_plan(Plan((more,)), tmp_path, resume=True, progress=False, plot=False)
    # an interrupted one (cells, no run record): cells of other settings are redone
    (tmp_path / "run.json").unlink()
    rows = run_plan(Plan((more,)), tmp_path, resume=True, progress=False, plot=False)
    assert json.loads((tmp_path / "run.json").read_text())["cells_skipped_on_resume"] == 0
    assert {r.rounds for r in rows} == {8}
    # Another regime list leaves the fingerprint (and the finished cells) alone
    wider = dataclasses.replace(more, regimes=("tiny", "small", "low-entropy"))
    (tmp_path / "run.json").unlink()
    fresh = run_plan(Plan((wider,)), tmp_path, resume=True, progress=False, plot=False)
    assert json.loads((tmp_path / "run.json").read_text())["cells_skipped_on_resume"] == 2
    assert _numbers(fresh)[: len(rows)] == _numbers(rows)
    # Other worlds are other settings: refused when finished, redone when interrupted
    fewer = dataclasses.replace(wider, worlds=2)
    with pytest.raises(ValueError, match="with other settings"):
        run_plan(Plan((fewer,)), tmp_path, resume=True, progress=False, plot=False)
    (tmp_path / "run.json").unlink()
    two = run_plan(Plan((fewer,)), tmp_path, resume=True, progress=False, plot=False)
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["cells_skipped_on_resume"] == 0 and record["plan"]["ddtree"]["worlds"] == 2
    assert {r.worlds for r in two} == {2}
    assert {len(r.tau_world_means) for r in two} == {2}


def test_world_shares_split_the_rounds_and_number_the_seeds():
    from treespec_sim.families import world_shares

    for rounds, worlds, seed, want in ((64, 3, 0, [22, 21, 21]), (96, 3, 4, [32, 32, 32]),
                                       (4, 3, 1, [2, 1, 1]), (5, 1, 9, [5]),
                                       (11, 4, 2, [3, 3, 3, 2])):
        shares = world_shares(rounds, worlds, seed)
        assert [s.rounds for s in shares] == want and sum(want) == rounds
        assert [s.seed for s in shares] == [seed + i for i in range(worlds)]
        assert [s.index for s in shares] == list(range(worlds))
    for rounds, worlds, match in ((2, 3, "rounds must be an integer >= worlds"),
                                  (6, 0, "worlds must be an integer >= 1"),
                                  (6, True, "worlds must be an integer >= 1")):
        with pytest.raises(ValueError, match=match):
            world_shares(rounds, worlds, 0)


def test_cell_fingerprint_includes_the_worlds():
    from treespec_sim.families import RunSettings
    from treespec_sim.sweep_store import cell_path as _cell_path

    grid = DDTreeGrid(("tiny",), rounds=6)
    cell = grid.cells()[0]
    other = dataclasses.replace(cell, grid=dataclasses.replace(grid, worlds=2))
    assert cell.key == other.key
    assert _cell_path(Path("o"), cell, RunSettings()) != _cell_path(Path("o"), other,
                                                                     RunSettings())


def test_world_interval_is_mean_ci_over_the_world_means():
    from scipy import stats as sps

    from treespec_sim.stats import mean_ci, t_quantile, world_ci, world_columns

    means = [9.35, 9.93, 9.83]
    ci = world_ci(means)
    half = sps.t.ppf(0.975, 2) * np.std(means, ddof=1) / np.sqrt(3)
    assert (ci.mean, ci.low, ci.high) == pytest.approx(
        (np.mean(means), np.mean(means) - half, np.mean(means) + half), abs=1e-12)
    assert ci == mean_ci(np.array(means))
    assert t_quantile(2) == sps.t.ppf(0.975, 2) == pytest.approx(4.3027, abs=1e-4)
    cols = world_columns(means, prefix="rel")
    assert cols == {"rel_world_means": means, "rel_world_ci_low": ci.low,
                    "rel_world_ci_high": ci.high}
    one = world_ci([3.0])
    assert one.mean == 3.0 and np.isnan(one.low) and np.isnan(one.high)
    for bad in ([], [1.0, np.nan], [[1.0, 2.0]]):
        with pytest.raises(ValueError, match="world_means"):
            world_ci(bad)


def test_paper_preset_runs_three_worlds_at_full_vocabulary():
    from treespec_sim.sweep import get_preset
    from treespec_sim.synth import get_regime

    for name in ("paper", "quick"):
        plan = get_preset(name)
        assert all(g.worlds >= 3 for g in plan.grids), name
    grids = {g.family: g for g in get_preset("paper").grids}
    assert set(grids) == {"ddtree", "caddtree", "stochastic", "verifiers"}
    assert grids["ddtree"].temperatures == (0.0, 1.0)
    assert grids["stochastic"].temperatures == (0.0, 0.6, 1.0)
    assert grids["stochastic"].vocab == 0  # no cap: the regimes' own V
    assert StochasticGrid(("tiny",)).vocab == 0
    for g in grids.values():
        for regime in g.regimes:
            if regime in ("math500", "alpaca"):  # calibrated regimes are V = 32768
                assert get_regime(regime).vocab_size == 32768


def test_a_chunk_saves_every_cell_as_it_finishes(monkeypatch):
    import treespec_sim.sweep as sweep_module
    from treespec_sim.families import RunSettings
    from treespec_sim.sweep import _chunks_by_regime, _run_chunk

    cells = small_plan().cells()
    chunks = _chunks_by_regime(cells, 2)
    assert sorted(c.key for ch in chunks for c in ch) == sorted(c.key for c in cells)
    assert all(len({c.regime for c in ch}) == 1 for ch in chunks)
    assert max(len(ch) for ch in chunks) <= -(-len(cells) // 4)
    ran: list[str] = []
    monkeypatch.setattr(sweep_module, "run_cell",
                        lambda cell, settings: ran.append(cell.key) or [{"cell": cell.key}])
    saved = []
    chunk = next(ch for ch in chunks if len(ch) > 1)
    out = _run_chunk(chunk, RunSettings(), lambda cell, rows: saved.append((cell.key, len(ran))))
    # each cell is saved right after it ran, before the next one starts
    assert saved == [(c.key, i + 1) for i, c in enumerate(chunk)]
    assert out == [[{"cell": c.key}] for c in chunk]


def test_workers_give_the_same_numbers(tmp_path):
    plan = Plan((DDTreeGrid(("tiny", "small"), budgets=(2, 4), rounds=6),
                 StochasticGrid(("small",), budgets=(4,), temperatures=(1.0,), rounds=4)))
    one = run_plan(plan, tmp_path / "one", progress=False, plot=False)
    two = run_plan(plan, tmp_path / "two", workers=2, progress=False, plot=False)
    assert _numbers(one) == _numbers(two)


def test_dask_local_cluster_gives_the_same_numbers(tmp_path):
    distributed = pytest.importorskip("distributed")
    plan = Plan((DDTreeGrid(("tiny",), budgets=(2, 4), rounds=6),
                 VerifierGrid(("small",), shapes=("2x2",), rounds=4),
                 *_extrapolating_plan().grids[1:]), cost_model="a800-qwen3-8b")
    local = run_plan(plan, tmp_path / "local", progress=False, plot=False)
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster:
        remote = run_plan(plan, tmp_path / "dask", scheduler=cluster.scheduler_address,
                          progress=False, plot=False)
    assert _numbers(local) == _numbers(remote)
    # the cells a dask worker ran carry their extrapolation record back too
    records = [json.loads((tmp_path / d / "run.json").read_text())["extrapolated"]
               for d in ("local", "dask")]
    assert records[0] == records[1] and [e["cell"] for e in records[0]] == \
        ["caddtree__small__T0.0__B600"]


@pytest.mark.parametrize("workers", [1, 2])
def test_resume_after_a_kill_redoes_nothing_finished(tmp_path, workers):
    config = tmp_path / "grid.toml"
    config.write_text('[ddtree]\nregimes = ["tiny", "small", "low-entropy", "mid-entropy"]\n'
                      'budgets = [4, 16]\ntemperatures = [0.0, 1.0]\nrounds = 6\n')
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "treespec_sim.sweep", "--config", str(config), "--out",
           str(out), "--quiet", "--no-plot", "--workers", str(workers)]
    # Its own process group, so that the kill also takes the worker processes (as a Ctrl-C or
    # a killed job would); with 2 workers the cells are saved by the workers themselves.
    proc = subprocess.Popen(cmd, start_new_session=True)
    deadline = time.time() + 120
    while time.time() < deadline and len(list(out.rglob("cells/**/*.json"))) < 2:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    finished = {p: p.stat().st_mtime_ns for p in out.rglob("cells/**/*.json")}
    assert finished, "no cell finished before the kill"
    # no torn results: every finished cell parses (a kill between a cell's temporary file and
    # its rename can leave the temporary ".<name>.<random>.tmp", which is never read as a cell)
    for p in finished:
        json.loads(p.read_text())
    assert subprocess.run([*cmd, "--resume"], check=False).returncode == 0
    assert all(p.stat().st_mtime_ns == t for p, t in finished.items())
    record = json.loads((out / "run.json").read_text())
    assert record["cells_skipped_on_resume"] >= len(finished)
    assert record["cells"] == 8


def test_cli_help_presets_and_errors(capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--preset", "--config", "--regimes", "--rounds", "--out", "--resume", "--seed",
                "--workers", "--scheduler", "--cost-model"):
        assert opt in out
    assert {"paper", "quick", "ddtree", "caddtree", "stochastic", "verifiers"} <= set(PRESETS)
    assert main(["--regimes", "nope"]) == 2
    assert "unknown regime 'nope'" in capsys.readouterr().err
    assert main(["--resume"]) == 2
    assert main(["--config", str(tmp_path / "missing.toml")]) == 2
    assert "no such file" in capsys.readouterr().err
    assert "--worlds" in out
    assert main(["--preset", "quick", "--worlds", "0", "--out", str(tmp_path / "w")]) == 2
    err = capsys.readouterr().err
    assert "worlds must be an integer >= 1" in err and len(err.strip().splitlines()) == 1


def test_a_failing_cell_stops_a_multi_worker_sweep(tmp_path, monkeypatch):
    import multiprocessing

    import treespec_sim.sweep as sweep_module

    if multiprocessing.get_start_method() != "fork":
        pytest.skip("the patched run_cell reaches the workers only when they are forked")
    original = sweep_module.run_cell

    def failing(cell, settings):
        if cell.regime == "small" and cell.family == "verifiers":
            raise RuntimeError(f"boom in {cell.key}")
        return original(cell, settings)

    monkeypatch.setattr(sweep_module, "run_cell", failing)
    with pytest.raises(RuntimeError, match="boom in verifiers"):
        run_plan(small_plan(), tmp_path, workers=2, progress=False, plot=False)
    assert not (tmp_path / "results.csv").exists()  # no table from a failed sweep


# ------------------------------------------------------------ resume of a finished run
def _counting(monkeypatch):
    """Patch the sweep's run_cell to note the key of every cell it computes (in-process)."""
    import treespec_sim.sweep as sweep_module

    ran: list[str] = []
    original = sweep_module.run_cell
    monkeypatch.setattr(sweep_module, "run_cell",
                        lambda cell, settings: ran.append(cell.key) or original(cell, settings))
    return ran


def test_resume_of_a_finished_run_computes_only_the_new_cells(tmp_path, monkeypatch):
    grid = DDTreeGrid(("tiny", "small"), budgets=(2, 4), temperatures=(0.0,), rounds=6)
    stoch = StochasticGrid(("small",), budgets=(4,), temperatures=(1.0,), rounds=4)
    first = run_plan(Plan((grid, stoch)), tmp_path, progress=False, plot=False)
    cells = sorted((tmp_path / "cells").rglob("*.json"))
    stamps = {p: p.stat().st_mtime_ns for p in cells}
    ran = _counting(monkeypatch)
    # the same grid plus a regime and a temperature, and a family it did not have
    wider = Plan((dataclasses.replace(grid, regimes=("tiny", "small", "low-entropy"),
                                      temperatures=(0.0, 1.0)), stoch,
                  VerifierGrid(("small",), shapes=("2x2",), rounds=4)))
    with pytest.raises(ValueError, match=r"adds 5 new one\(s\): pass --resume"):
        run_plan(wider, tmp_path, progress=False, plot=False)  # never without --resume
    assert ran == []
    rows = run_plan(wider, tmp_path, resume=True, progress=False, plot=False)
    new = {c.key for c in wider.cells()} - {c.key for c in Plan((grid, stoch)).cells()}
    assert sorted(ran) == sorted(new) and len(new) == 5
    assert all(p.stat().st_mtime_ns == t for p, t in stamps.items())  # finished cells kept
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["cells_skipped_on_resume"] == len(cells) and record["cells"] == len(cells) + 5
    assert record["plan"]["ddtree"]["regimes"] == ["tiny", "small", "low-entropy"]
    tau = lambda rs: {(r.cell, r.method, r.budget): r.tau_mean  # noqa: E731
                      for r in rs}
    old, now = tau(first), tau(rows)
    assert len(old) == len(first) and {k: now[k] for k in old} == old
    with open(tmp_path / "results.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == len(rows)


@pytest.mark.parametrize("change, named", [
    ({"rounds": 8}, "ddtree.rounds 6 -> 8"),
    ({"worlds": 2}, "ddtree.worlds 3 -> 2"),
    ({"budgets": (2, 4, 8)}, "ddtree.budgets adds 8 ([2, 4] -> [2, 4, 8]): every ddtree cell "
                             "holds all its budgets, so each finished one would change"),
    ({"regimes": ("tiny",)}, """ddtree.regimes drops small (["tiny", "small"] -> ["tiny"]): """
                             "the finished cells of the dropped regimes would be lost"),
    ({"regimes": ("tiny", "small", "low-entropy"), "rounds": 8}, "ddtree.rounds 6 -> 8"),
])
def test_resume_refuses_a_change_to_finished_cells_naming_it(tmp_path, monkeypatch, change,
                                                             named):
    grid = DDTreeGrid(("tiny", "small"), budgets=(2, 4), temperatures=(0.0,), rounds=6)
    run_plan(Plan((grid,)), tmp_path, progress=False, plot=False)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    ran = _counting(monkeypatch)
    with pytest.raises(ValueError, match="with other settings") as exc:
        run_plan(Plan((dataclasses.replace(grid, **change),)), tmp_path, resume=True,
                 progress=False, plot=False)
    assert named in str(exc.value) and "would change or drop its finished cells" in str(exc.value)
    assert "\n" not in str(exc.value)
    assert "ddtree.regimes" not in str(exc.value) or "regimes" in named  # only the culprit
    assert ran == [] and before == {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}


def test_resume_refuses_another_seed_or_cost_model_or_a_dropped_family(tmp_path):
    grid = DDTreeGrid(("tiny",), budgets=(2, 4), temperatures=(0.0,), rounds=6)
    ver = VerifierGrid(("small",), shapes=("2x2",), rounds=4)
    run_plan(Plan((grid, ver)), tmp_path, progress=False, plot=False)
    for plan, named in ((Plan((grid, ver), seed=1), "seed 0 -> 1"),
                        (Plan((grid, ver), cost_model="a800-qwen3-8b"),
                         "cost_model 'h200-qwen3-8b' -> 'a800-qwen3-8b'"),
                        (Plan((grid,)), "the verifiers family is dropped")):
        with pytest.raises(ValueError, match="with other settings") as exc:
            run_plan(plan, tmp_path, resume=True, progress=False, plot=False)
        assert named in str(exc.value)


def test_a_family_whose_cells_are_drawn_from_more_lists_gains_those_too(tmp_path, monkeypatch):
    """A grid's ``cell_axes`` names the lists its cells take one value of: the stochastic
    family's cells are one per drafter too (each holds every method and budget: its claims
    pair them), the verifier family's one per shape, so a finished run can gain those."""
    assert "drafters" in StochasticGrid.cell_axes
    assert "budgets" not in StochasticGrid.cell_axes
    assert "shapes" in VerifierGrid.cell_axes
    grid = StochasticGrid(("small",), budgets=(4,), temperatures=(1.0,), rounds=4)
    run_plan(Plan((grid,)), tmp_path, progress=False, plot=False)
    ran = _counting(monkeypatch)
    run_plan(Plan((dataclasses.replace(grid, drafters=("corrected", "none")),)), tmp_path,
             resume=True, progress=False, plot=False)
    assert ran == ["stochastic__small__none__T1.0__B4"]


# ------------------------------------------------------------ latency outside its range
def _extrapolating_plan() -> Plan:
    """A CaDDTree cell that prices up to 601 tokens on the A800 table (measured to 512) and
    H200's roofline (no measured range), and ddtree cells that stay inside the A800 table."""
    return Plan((DDTreeGrid(("tiny",), budgets=(2, 4), temperatures=(0.0, 1.0), rounds=4),
                 CaDDTreeGrid(("small",), cost_models=("a800-qwen3-8b", "h200-qwen3-8b"),
                              rounds=4, max_budget=600)), cost_model="a800-qwen3-8b")


@pytest.mark.parametrize("workers", [1, 2])
def test_the_sweep_names_the_cells_that_priced_outside_the_measurements(tmp_path, workers):
    plan = _extrapolating_plan()
    rows = run_plan(plan, tmp_path, workers=workers, progress=False, plot=False)
    record = json.loads((tmp_path / "run.json").read_text())
    want = [{"cell": "caddtree__small__T0.0__B600", "model": "a800-qwen3-8b",
             "kind": "TabulatedCost", "axis": "tokens", "requested": [1, 601],
             "measured": [0, 512], "action": "above: the last measured slope extended"}]
    assert record["extrapolated"] == want
    summary = (tmp_path / "summary.md").read_text()
    assert "## Latency priced outside its measured range" in summary
    line = next(ln for ln in summary.splitlines() if "`caddtree__small__T0.0__B600`" in ln)
    assert "`a800-qwen3-8b`" in line and "1..601 tokens" in line and "0..512 tokens" in line
    assert not any("ddtree__tiny" in ln for ln in summary.splitlines() if "tokens |" in ln)
    # kept in the cell file: a resumed run lists the reused cell too, numbers unchanged
    (tmp_path / "run.json").unlink()
    again = run_plan(plan, tmp_path, resume=True, progress=False, plot=False)
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["cells_skipped_on_resume"] == record["cells"] and record["extrapolated"] == want
    assert _numbers(again) == _numbers(rows)
