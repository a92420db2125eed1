"""The sweep on a trace (``docs/traces.md``, "The sweep on a trace"): the shipped trace stands
where a regime stands, its numbers are the replayed rounds', what it does not hold is refused
before any work, and a run on it resumes like any other."""

from __future__ import annotations

import csv
import json
import re
import shutil
import time
import tomllib
from pathlib import Path

import numpy as np
import pytest

from treespec_sim import engine, trace
from treespec_sim.families import DDTreeGrid, VerifierGrid
from treespec_sim.methods import rules_for
from treespec_sim.stats import mean_ci
from treespec_sim.sweep import Plan, main, plan_from_dict, run_plan, trace_plan

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "real_models" / "traces" / "tiny-b256.npz"
REGIME = "trace:tiny-b256"


@pytest.fixture(scope="module")
def shipped():
    return trace.load(SHIPPED)


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """``python -m treespec_sim.sweep --trace <shipped> --out DIR``, timed."""
    out = tmp_path_factory.mktemp("sweep") / "run"
    t0 = time.perf_counter()
    assert main(["--trace", str(SHIPPED), "--out", str(out), "--quiet"]) == 0
    return out, time.perf_counter() - t0


def _csv(path: Path) -> list[dict]:
    with open(path) as f:
        return list(csv.DictReader(f))


def test_the_sweep_on_the_shipped_trace_writes_the_usual_outputs(swept):
    out, wall = swept
    assert wall < 60.0
    for name in ("results.csv", "run.json", "summary.md", "tau_vs_budget.png",
                 "lost_mass_by_depth.png", "throughput_vs_budget.png", "verifier_gains.png"):
        assert (out / name).is_file(), name
    rows = _csv(out / "results.csv")
    assert {r["family"] for r in rows} == {"ddtree", "caddtree", "verifiers"}
    assert {r["regime"] for r in rows} == {REGIME}
    record = json.loads((out / "run.json").read_text())
    assert record["trace"]["regime"] == REGIME
    assert record["trace"]["device"] == "cpu"
    assert record["plan"]["trace_sha256"] == record["trace"]["sha256"]
    summary = (out / "summary.md").read_text()
    # the report labels the trace's rows with its models and device
    assert "## The trace" in summary
    assert "real_models/checkpoints/tiny-target" in summary
    assert "float32, cpu" in summary
    assert "tiny-target+tiny-drafter on cpu" in summary


def _replayed(tr, method, budget, temperature):
    return np.array([engine.run_round(tr, c, method=method, budget=budget,
                                      temperature=temperature, rng=np.random.default_rng(0),
                                      sample=False).expected_tau for c in tr.contexts])


@pytest.mark.parametrize("t", [0.0, 1.0])
def test_ddtree_rows_are_the_replayed_rounds(swept, shipped, t):
    rows = [r for r in _csv(swept[0] / "results.csv") if r["family"] == "ddtree"
            and float(r["temperature"]) == t]
    by = {(r["method"], int(r["budget"])): r for r in rows}
    prompts = np.array([c.prompt for c in shipped.contexts])
    for method, budget in (("chain", shipped.depth), ("ddtree", 16), ("ddtree", 64),
                           ("ddtree", 256), ("dynamic", 32)):
        taus = _replayed(shipped, method, None if method == "chain" else budget, t)
        r = by[(method, budget)]
        assert int(r["rounds"]) == len(shipped.contexts)
        assert float(r["tau_mean"]) == pytest.approx(taus.mean(), rel=1e-5)
        # the interval is over the recorded prompts (the decode's sequences)
        ci = mean_ci([taus[prompts == p] for p in np.unique(prompts)])
        assert float(r["tau_ci_low"]) == pytest.approx(ci.low, rel=1e-5)
        assert float(r["tau_ci_high"]) == pytest.approx(ci.high, rel=1e-5)


def test_caddtree_fixed_budgets_agree_with_the_replayed_rounds(swept, shipped):
    rows = [r for r in _csv(swept[0] / "results.csv") if r["family"] == "caddtree"]
    fixed = {(float(r["temperature"]), r["cost_model"], int(r["budget"])): r for r in rows
             if r["method"] == "ddtree"}
    assert max(b for _, _, b in fixed) == shipped.b_max
    for t in shipped.temperatures:
        for b in (16, 64, 256):
            taus = _replayed(shipped, "ddtree", b, t)
            assert float(fixed[(t, "recorded", b)]["tau_mean"]) == pytest.approx(
                taus.mean(), rel=1e-5)
        oracle = next(r for r in rows if r["method"] == "ddtree-oracle"
                      and float(r["temperature"]) == t and r["cost_model"] == "recorded")
        best = max((r for k, r in fixed.items() if k[:2] == (t, "recorded")),
                   key=lambda r: float(r["throughput_tok_s"]))
        assert float(oracle["tree_size_mean"]) == float(best["budget"])


def test_verifier_rows_replay_the_recorded_sampled_tree(swept, shipped):
    rows = {r["verifier"]: r for r in _csv(swept[0] / "results.csv")
            if r["family"] == "verifiers"}
    sp = shipped.sampled_spec
    assert set(rows) == set(rules_for(sp["scheme"]))  # a sampled tree: chains-only rules out
    for rule in ("rrsw", "traversal", "univer"):
        taus = [engine.run_round(shipped, c, method="recorded", rule=rule,
                                 temperature=sp["temperature"], rng=np.random.default_rng(0),
                                 sample=False).expected_tau for c in shipped.contexts]
        assert float(rows[rule]["tau_mean"]) == pytest.approx(np.mean(taus), rel=1e-5)
    assert float(rows["rrsw"]["rel_to_baseline"]) == pytest.approx(1.0)


def test_resume_reuses_every_cell_and_a_changed_trace_is_refused(tmp_path, shipped):
    path = tmp_path / "t.npz"
    shutil.copy(SHIPPED, path)
    out = tmp_path / "run"
    args = ["--trace", str(path), "--out", str(out), "--quiet", "--no-plot"]
    assert main(args) == 0
    first = (out / "results.csv").read_text()
    assert main([*args, "--resume"]) == 0
    record = json.loads((out / "run.json").read_text())
    assert record["cells_skipped_on_resume"] == record["cells"] == 5
    assert (out / "results.csv").read_text() == first
    # the same file name with other content: its cells are not reused
    header, arrays = trace.read(path)
    header["created"] = "another recording"
    trace.write(path, header, arrays)
    with pytest.raises(ValueError, match="trace_sha256"):
        run_plan(trace_plan(str(path)), out, resume=True, plot=False, progress=False)


def _plan(**data) -> Plan:
    return plan_from_dict({"trace": str(SHIPPED), **data})


@pytest.mark.parametrize("data, match", [
    ({"ddtree": {"budgets": [64, 512]}},
     r"ddtree\.budgets: budget 512 is above the trace 'trace:tiny-b256'.s recorded B_max = 256"),
    ({"ddtree": {"temperatures": [0, 0.7]}},
     r"ddtree\.temperatures: T = 0\.7 not recorded in the trace 'trace:tiny-b256' "
     r"\(recorded: 0, 1\)"),
    ({"caddtree": {}}, r"caddtree\.max_budget: budget 1024 is above .* B_max = 256"),
    ({"caddtree": {"max_budget": 256, "temperatures": [0.5]}},
     r"caddtree\.temperatures: T = 0\.5 not recorded"),
    ({"verifiers": {"shapes": ["recorded"], "temperatures": [0.6]}},
     r"verifiers\.temperatures: T = 0\.6 not recorded for the trace 'trace:tiny-b256'.s "
     r"sampled tree \(recorded at T = 1 only\)"),
    ({"verifiers": {"shapes": ["2x2"]}}, r"verifiers\.shapes: a trace replays only its recorded"),
    ({"stochastic": {}}, r"stochastic: this family does not run on a trace"),
    ({"ddtree": {"regimes": ["trace:other"]}},
     r"ddtree\.regimes: 'trace:other' is not this plan's trace 'trace:tiny-b256'"),
    ({"preset": "quick"}, "preset and trace"),
])
def test_what_the_trace_does_not_hold_is_refused_up_front(data, match):
    with pytest.raises(ValueError, match=match):
        _plan(**data)


def test_refusals_come_before_any_work(tmp_path, capsys):
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'trace = "{SHIPPED}"\n[ddtree]\nbudgets = [16, 1024]\n')
    out = tmp_path / "run"
    assert main(["--config", str(cfg), "--out", str(out), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "ddtree.budgets: budget 1024" in err and "B_max = 256" in err
    assert not out.exists()
    assert main(["--trace", str(tmp_path / "none.npz"), "--out", str(out)]) == 2
    assert "trace: no such file" in capsys.readouterr().err
    assert main(["--trace", str(SHIPPED), "--preset", "quick", "--out", str(out)]) == 2
    assert "--preset and --trace" in capsys.readouterr().err
    with pytest.raises(ValueError, match=r"'trace:tiny-b256' names a trace, but the plan has "
                                         "none"):
        Plan((DDTreeGrid((REGIME,), budgets=(16,), rounds=4),))
    with pytest.raises(ValueError, match="'recorded' is a trace's recorded sampled tree"):
        VerifierGrid(("small",), shapes=("recorded",))


def test_a_config_mixes_the_trace_with_regimes():
    plan = _plan(ddtree={"regimes": ["small", "trace"], "budgets": [4, 16], "rounds": 4},
                 verifiers={"regimes": ["small", "trace"], "shapes": ["2x2", "recorded"],
                            "rounds": 4})
    cells = {(c.family, c.regime, c.option) for c in plan.cells()}
    assert ("ddtree", "small", "") in cells and ("ddtree", REGIME, "") in cells
    assert ("verifiers", "small", "2x2") in cells and ("verifiers", REGIME, "recorded") in cells
    assert ("verifiers", REGIME, "2x2") not in cells
    assert ("verifiers", "small", "recorded") not in cells
    # a plan record reads back to the same cells (resume)
    again = plan_from_dict(json.loads(json.dumps(plan.to_dict())))
    assert [c.key for c in again.cells()] == [c.key for c in plan.cells()]


def _topk_copy(path: Path, k: int) -> Path:
    """The shipped trace with its drafter stored as its top ``k`` per depth."""
    header, arrays = trace.read(SHIPPED)
    arrays = dict(arrays)
    log_q = arrays.pop("log_q").astype(np.float64)
    order = np.argsort(-log_q, axis=2, kind="stable")[:, :, :k]
    top = np.take_along_axis(log_q, order, axis=2)
    rest = np.log(np.clip(1.0 - np.exp(top).sum(axis=2), 1e-300, None))
    arrays.update(q_top_tokens=order.astype(np.int32), q_top_logp=top.astype(np.float32),
                  q_rest_logp=rest)
    header["settings"] = {**header["settings"], "top_k": k}
    return trace.write(path, header, arrays)


def test_a_top_k_trace_refuses_cost_aware_budgets_above_k(tmp_path):
    path = _topk_copy(tmp_path / "topk.npz", 32)
    tr = trace.load(path)
    c = tr.contexts[0]
    rng = np.random.default_rng(0)
    with pytest.raises(ValueError, match=r"budget: 'caddtree' reads .* max budget 64, above "
                                         r"the recorded top K = 32"):
        engine.run_round(tr, c, method="caddtree", budget=64, cost="h200-qwen3-8b", rng=rng,
                         sample=False)
    ok = engine.run_round(tr, c, method="caddtree", budget=32, cost="h200-qwen3-8b", rng=rng,
                          sample=False)
    assert 1.0 <= ok.expected_tau <= tr.depth + 1
    with pytest.raises(ValueError, match=r"temperature T = 0\.5 is not recorded"):
        engine.run_round(tr, c, method="chain", temperature=0.5, rng=rng, sample=False)
    with pytest.raises(ValueError, match=r"ddtree\.budgets: budget 64 is above the drafter's "
                                         "recorded top K = 32"):
        plan_from_dict({"trace": str(path), "ddtree": {"budgets": [16, 64]}})
    plan = trace_plan(str(path))
    assert max(max(getattr(g, "budgets", (0,))) for g in plan.grids) <= 32


def test_the_docs_config_example_is_a_valid_plan(monkeypatch):
    text = (ROOT / "docs" / "traces.md").read_text()
    block = re.findall(r"```toml\n(.*?)```", text, re.S)[0]
    monkeypatch.chdir(ROOT)
    plan = plan_from_dict(tomllib.loads(block))
    keys = {c.key for c in plan.cells()}
    assert "ddtree__trace:tiny-b256__T0.0__B256" in keys and "ddtree__small__T0.0__B256" in keys
    assert {g.family for g in plan.grids} == {"ddtree", "caddtree"}
