import json

import numpy as np
import pytest

from treespec_sim.engine import decode, run_round, run_rounds, summarize
from treespec_sim.surrogate import surrogate_length
from treespec_sim.sweep import COLUMNS, PRESETS, SweepConfig, main, run_sweep
from treespec_sim.synth import Context, make_world


@pytest.fixture(scope="module")
def world():
    return make_world("mid-entropy", seed=0, vocab_size=256)


def test_round_record_is_consistent(world):
    ctx = Context(2, 5)
    rec, out = run_round(world, ctx, policy="ddtree", budget=32, rule="follow",
                         temperature=1.0, rng=np.random.default_rng(0))
    assert rec.tree_size == 32
    assert abs(rec.expected_tau - (1 + rec.coverage)) < 1e-12  # saturated verifier
    assert abs(sum(rec.exit_by_depth) - 1) < 1e-12 and abs(sum(rec.exit_by_cause) - 1) < 1e-12
    assert rec.sampled_tau == out.tau == len(out.tokens)
    from treespec_sim.policies import ddtree

    tree = ddtree(world.draft(ctx), 32, root_token=ctx.last_token)
    assert rec.surrogate == pytest.approx(surrogate_length(tree, world.draft(ctx)), rel=1e-12)


def test_decode_is_reproducible_and_commits_rounds(world):
    a = decode(world, Context(1, 9), policy="ddtree", budget=16, rule="tev", temperature=0.7,
               n_tokens=40, rng=np.random.default_rng(5))
    b = decode(world, Context(1, 9), policy="ddtree", budget=16, rule="tev", temperature=0.7,
               n_tokens=40, rng=np.random.default_rng(5))
    assert np.array_equal(a.tokens, b.tokens) and len(a.tokens) == 40
    assert sum(r.sampled_tau for r in a.records) >= 40


def test_greedy_decode_equals_target_greedy(world):
    ctx = Context(0, 11)
    got = decode(world, ctx, policy="ddtree", budget=16, rule="follow", temperature=0.0,
                 n_tokens=30, rng=np.random.default_rng(0)).tokens
    want = world.target_sample(ctx, 30, np.random.default_rng(1), 0.0)
    assert np.array_equal(got, want)


def test_summary_ci_brackets_mean_and_sampled_ci_covers_exact_mean(world):
    seqs = run_rounds(world, policy="chain", budget=15, rule="follow", temperature=1.0,
                      rounds=40, rng=np.random.default_rng(3), rounds_per_sequence=1)
    s = summarize(seqs)
    assert s.rounds == 40 and s.sequences == 40
    assert s.expected_tau.low < s.expected_tau.mean < s.expected_tau.high
    assert s.sampled_tau.low < s.expected_tau.mean < s.sampled_tau.high  # same expectation


@pytest.mark.parametrize("kwargs, match", [
    ({"temperature": -1.0}, "temperature"),
    ({"rule": "nope"}, "unknown rule"),
    ({"rounds": 0}, "rounds"),
])
def test_engine_bad_input(world, kwargs, match):
    args = {"policy": "ddtree", "budget": 4, "rule": "follow", "temperature": 1.0,
            "rounds": 2, "rng": np.random.default_rng(0)}
    args.update(kwargs)
    with pytest.raises(ValueError, match=match):
        run_rounds(world, **args)


def test_unknown_policy(world):
    with pytest.raises(ValueError, match="unknown policy 'bfs'; known policies: chain, ddtree"):
        run_round(world, Context(0, 0), policy="bfs", budget=4, rule="follow",
                  temperature=1.0, rng=np.random.default_rng(0))


def test_config_validation_names_the_key():
    with pytest.raises(ValueError, match="regimes: unknown regime 'chatty'"):
        SweepConfig(regimes=("chatty",), methods=("chain",), budgets=(4,), temperatures=(0,))
    with pytest.raises(ValueError, match="methods: unknown method"):
        SweepConfig(regimes=("tiny",), methods=("bfs",), budgets=(4,), temperatures=(0,))


def test_sweep_writes_outputs_and_resumes(tmp_path, capsys):
    config = SweepConfig(regimes=("tiny", "small"), methods=("chain", "ddtree"),
                         budgets=(2, 4), temperatures=(0.0, 1.0), rounds=6)
    rows = run_sweep(config, tmp_path, progress=False)
    assert len(rows) == 2 * 2 * (1 + 2)
    header = (tmp_path / "results.csv").read_text().splitlines()[0].split(",")
    assert tuple(header) == COLUMNS
    record = json.loads((tmp_path / "run.json").read_text())
    assert record["config"]["regimes"] == ["tiny", "small"] and "numpy" in record["versions"]
    assert (tmp_path / "tau_vs_budget.png").stat().st_size > 1000
    assert "| tiny | ddtree |" in (tmp_path / "summary.md").read_text()
    # resume: delete one cell's file; only that cell is recomputed, with identical numbers
    cells = sorted((tmp_path / "cells").glob("*.json"))
    assert len(cells) == len(rows)
    victim = cells[0]
    before = json.loads(victim.read_text())
    victim.unlink()
    mtimes = {p: p.stat().st_mtime_ns for p in cells[1:]}
    rows2 = run_sweep(config, tmp_path, resume=True, progress=False, plot=False)
    assert json.loads((tmp_path / "run.json").read_text())["cells_skipped_on_resume"] == 11
    after = json.loads(victim.read_text())
    assert {k: v for k, v in after.items() if k != "wall_s"} == \
        {k: v for k, v in before.items() if k != "wall_s"}
    assert all(p.stat().st_mtime_ns == t for p, t in mtimes.items())
    assert [r["tau_mean"] for r in rows2] == [r["tau_mean"] for r in rows]


def test_cli_help_and_errors(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--preset", "--regimes", "--budgets", "--temperatures", "--rounds", "--out",
                "--resume", "--seed", "--rule", "--methods"):
        assert opt in out
    with pytest.raises(SystemExit):
        main(["--regimes", "nope"])
    assert "unknown regime 'nope'" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["--resume"])


def test_cli_runs(tmp_path):
    assert main(["--preset", "quick", "--regimes", "tiny", "--rounds", "4", "--out",
                 str(tmp_path), "--quiet", "--no-plot"]) == 0
    assert (tmp_path / "results.csv").exists()
    assert "default" in PRESETS and "quick" in PRESETS
