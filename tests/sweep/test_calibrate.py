"""Calibrated regimes: the stored fit, its re-evaluation, the CLI, and the knobs it relies on.

Statistical comparisons use fixed seeds (so they are deterministic) and a tolerance of
``Z = 4`` combined standard errors: were the stored value and the re-evaluation unbiased
estimates of the same mean, a random seed would exceed it with probability about 6e-5.
"""

from __future__ import annotations

import dataclasses
import json
import math
import subprocess
import sys

import numpy as np
import pytest
from scipy.special import logsumexp

from treespec_sim.calibrate import (
    CALIBRATED_REGIMES,
    CALIBRATION_FILE,
    CELLS,
    CHECK_WORLD_SEEDS,
    DERIVED_WEIGHT,
    EVAL_WORLD_SEEDS,
    FIT_WORLD_SEEDS,
    FITTED_KNOBS,
    PUBLISHED,
    QUANTITIES,
    T1_NEAREST,
    TABLE1,
    TOLERANCE,
    CellEvaluation,
    base_spec,
    cell_values,
    check,
    derive_targets,
    evaluate,
    evaluate_cells,
    fit_regime_table1,
    main,
    table1_targets,
)
from treespec_sim.engine import run_round
from treespec_sim.synth import REGIMES, Context, get_regime, make_world
from treespec_sim.synth.regimes import RegimeSpec, load_calibrated

Z = 4.0
#: Published cells the stored fit misses by more than the tolerance (see the page's
#: "Limitations"; each has its own test of the direction of the miss).
KNOWN_MISSES: set[tuple[str, str]] = set()


@pytest.fixture(scope="module")
def stored() -> dict:
    return json.loads(CALIBRATION_FILE.read_text())


# ---------------------------------------------------------------------- the stored fit
def test_eight_regimes_load():
    assert set(CALIBRATED_REGIMES) <= set(REGIMES)
    assert len(CALIBRATED_REGIMES) == 8
    for name in CALIBRATED_REGIMES:
        spec = get_regime(name)
        assert spec.name == name
        assert (spec.vocab_size, spec.depth, spec.variants) == (32768, 15, 4)
    # the old regimes are still there, unchanged knobs included
    assert {"tiny", "small", "low-entropy", "mid-entropy", "high-entropy"} <= set(REGIMES)
    assert get_regime("low-entropy").depth_sharpening == 0.0
    assert load_calibrated(CALIBRATION_FILE) == {n: REGIMES[n] for n in CALIBRATED_REGIMES}


def test_stored_achieved_values_are_within_tolerance(stored):
    entries = stored["regimes"]
    assert set(entries) == set(CALIBRATED_REGIMES)
    targets = derive_targets()
    cells = table1_targets()
    for name, e in entries.items():
        t, a = e["target"], e["achieved"]
        # the file's targets are the code's targets
        assert t["chain"] == pytest.approx(targets[name].chain)
        assert t["ddtree64"] == pytest.approx(targets[name].ddtree64)
        assert t["ddtree64_t1"] == pytest.approx(targets[name].ddtree64_t1)
        assert e["table1"]["targets"] == cells[name]
        for q in QUANTITIES:
            assert 0 < a[q]["se"] < 0.03 * t[q], (name, q)          # measured, and precisely
            assert a[q]["n"] >= 1000
            # many worlds, each measured on its own
            assert len(a["per_world"][q]) == len(a["world_seeds"]) >= 8
            assert np.mean(a["per_world"][q]) == pytest.approx(a[q]["mean"], rel=0.01)
        # every published cell within the tolerance on the held-out worlds, but the ones the
        # page names as misses (docs/results/calibration.md, "Limitations")
        ok = []
        for q in CELLS:
            got, tgt = e["table1"]["achieved"][q], cells[name][q]
            assert got["ci"][0] < got["mean"] < got["ci"][1]
            assert got["n"] >= 1000 and len(got["per_world"]) >= 8
            if tgt["published"]:
                ok.append(abs(got["mean"] - tgt["value"]) <= TOLERANCE * tgt["value"])
                if (name, q) not in KNOWN_MISSES:
                    assert ok[-1], (name, q, got["mean"], tgt["value"])
        assert e["within_tolerance"] == all(ok)
        # math and code at T = 1: a large share of near-deterministic tokens and an 80th
        # percentile of order the 0.67 nats measured for Qwen3-8B on math (Wang et al. 2025)
        h = a["entropy_t1"]
        if e["family"] == "math-code":
            assert 0.2 < h["p80"] < 1.0, (name, h)
            # AIME25's published chain loses 35% at T = 1 (the others 6-17%), and its fitted
            # target is flatter there (docs/results/calibration.md, "The target's T = 1 law")
            if name != "aime25":
                assert h["share_below_0.05"] > 0.3, (name, h)
        # measured on seeds that the fit did not use
        assert not set(a["world_seeds"]) & set(e["fit"]["world_seeds"])
        assert a["context_seed"] != e["fit"]["context_seed"]
        assert set(e["fitted"]) == set(FITTED_KNOBS[e["family"]])
        for k, v in e["fitted"].items():
            assert e["knobs"][k] == v
    # chat forks more often than math and code (higher median token entropy at T = 1), but for
    # AIME25, whose fitted target is the flattest of all at T = 1 (its chain's 35% T = 1 loss)
    med = {n: e["achieved"]["entropy_t1"]["median"] for n, e in entries.items()}
    chat = [med[n] for n, e in entries.items() if e["family"] == "chat"]
    other = [med[n] for n, e in entries.items() if e["family"] != "chat" and n != "aime25"]
    assert min(chat) > max(other), med
    assert med["aime25"] == max(med.values()), med
    for key in ("date", "seeds", "git_commit", "command"):
        assert key in stored


def test_fast_re_evaluation_agrees_with_stored(stored):
    # One world seed and 200 contexts per regime keep this at a few seconds per regime; the
    # stored value (fresh seeds, thousands of contexts) must lie within Z combined s.e.
    for name in ("gsm8k", "alpaca"):
        e = stored["regimes"][name]
        ev = evaluate(get_regime(name), contexts=200, world_seeds=(7,),
                      rng=np.random.default_rng(11))
        for q in QUANTITIES:
            now, then = getattr(ev, q), e["achieved"][q]
            tol = Z * math.hypot(now.se, then["se"])
            assert abs(now.mean - then["mean"]) <= tol, (name, q, now, then)


def test_check_command_runs(capsys):
    out = subprocess.run([sys.executable, "-m", "treespec_sim.calibrate", "--check",
                          "--regimes", "alpaca", "--contexts", "20"],
                         capture_output=True, text=True, check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0].split()[0] == "regime" and lines[-1].split()[0] == "alpaca"
    evs = check(["mt-bench"], contexts=16, log=lambda s: None)
    assert set(evs) == {"mt-bench"}
    # one context on each of the sixteen check worlds, none of which a fit or evaluation used
    assert evs["mt-bench"].values.shape == (16, 1, len(CELLS))
    assert evs["mt-bench"].world_seeds == CHECK_WORLD_SEEDS
    assert not set(CHECK_WORLD_SEEDS) & (set(FIT_WORLD_SEEDS) | set(EVAL_WORLD_SEEDS))


def test_unknown_regime_is_a_clear_error(capsys):
    assert main(["--check", "--regimes", "nope"]) == 2
    err = capsys.readouterr().err
    assert "unknown calibrated regime 'nope'" in err and "math500" in err
    with pytest.raises(ValueError, match="unknown calibrated regime"):
        base_spec("low-entropy")
    with pytest.raises(ValueError, match="unknown calibrated regime"):
        check(["MATH500"], contexts=1)
    with pytest.raises(ValueError, match="unknown regime 'nope'"):
        get_regime("nope")
    with pytest.raises(ValueError, match="contexts"):
        evaluate(base_spec("alpaca"), contexts=0, world_seeds=(0,),
                 rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        evaluate(base_spec("alpaca"), contexts=1, world_seeds=(0,), rng=0)
    with pytest.raises(ValueError, match="world_seeds"):
        evaluate(base_spec("alpaca"), contexts=1, world_seeds=(), rng=np.random.default_rng(0))
    assert main(["--contexts", "0", "--check", "--regimes", "alpaca"]) == 2


def test_malformed_calibration_file(tmp_path):
    assert load_calibrated(tmp_path / "missing.json") == {}
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(ValueError, match="malformed"):
        load_calibrated(bad)
    bad.write_text(json.dumps({"regimes": {"x": {"knobs": {"name": "x", "bogus": 1}}}}))
    with pytest.raises(ValueError, match="bad knobs"):
        load_calibrated(bad)
    spec = get_regime("small").knobs()
    bad.write_text(json.dumps({"regimes": {"other": {"knobs": spec}}}))
    with pytest.raises(ValueError, match="holds regime"):
        load_calibrated(bad)


# ---------------------------------------------------------------------- targets
def test_published_targets_and_derivations():
    t = derive_targets()
    assert set(t) == set(CALIBRATED_REGIMES)
    for name, (chain, dd) in {"math500": (7.79, 9.76), "gsm8k": (6.57, 8.49),
                              "humaneval": (6.61, 8.01)}.items():
        assert (t[name].chain, t[name].ddtree64) == (chain, dd)
    assert t["mt-bench"].ddtree64 == 5.54 and t["alpaca"].chain == 3.12
    assert t["aime25"].chain == 7.39
    # DDTree Table 1 publishes every chain
    for name in CALIBRATED_REGIMES:
        assert t[name].chain == TABLE1[name]["chain"]
        assert t[name].chain_derivation.startswith("published")
    ref = [PUBLISHED[r] for r in ("math500", "gsm8k", "humaneval", "mt-bench")]
    g = np.mean([r["ddtree64"] / r["chain"] for r in ref])
    a = np.mean([r["ddtree64"] / r["chain"] / (r["ddtree_speedup"] / r["dflash_speedup"])
                 for r in ref])
    m = np.mean([r["ddtree64"] / r["ddtree_speedup"] for r in ref])
    assert t["alpaca"].ddtree64 == pytest.approx(3.12 * a * 3.36 / 2.07, abs=1e-3)
    assert t["aime25"].ddtree64 == pytest.approx(7.39 * a * 7.0 / 5.32, abs=1e-3)
    assert t["mbpp"].ddtree64 == pytest.approx(m * 6.4, abs=1e-3)
    assert t["livecodebench"].ddtree64 == pytest.approx(m * 7.1, abs=1e-3)
    # a table without the chain still derives it (the older tables' case)
    old = {r: dict(v) for r, v in PUBLISHED.items()}
    old["mt-bench"]["chain"] = old["mbpp"]["chain"] = None
    t_old = derive_targets(old)
    ref = [PUBLISHED[r] for r in ("math500", "gsm8k", "humaneval")]   # mt-bench drops out
    g = np.mean([r["ddtree64"] / r["chain"] for r in ref])
    a = np.mean([r["ddtree64"] / r["chain"] / (r["ddtree_speedup"] / r["dflash_speedup"])
                 for r in ref])
    m = np.mean([r["ddtree64"] / r["ddtree_speedup"] for r in ref])
    assert t_old["mt-bench"].chain == pytest.approx(5.54 / (a * 4.10 / 2.56), abs=1e-3)
    assert t_old["mbpp"].chain == pytest.approx(m * 6.4 / g, abs=1e-3)
    for name in CALIBRATED_REGIMES:     # DDTree@64 beats the chain everywhere, by 15-50%
        assert 1.15 < t[name].ddtree64 / t[name].chain < 1.5
        assert t[name].chain_derivation and t[name].ddtree64_derivation
        assert t[name].ddtree64_t1_derivation
        # T = 1 loses 8-16% of tau against T = 0 (published), and so do the derived targets
        assert 0.8 < t[name].ddtree64_t1 / t[name].ddtree64 < 0.95
    for name, value in {"math500": 8.17, "gsm8k": 7.84, "humaneval": 7.06,
                        "mt-bench": 5.03}.items():
        assert t[name].ddtree64_t1 == value
        assert t[name].ddtree64_t1_derivation.startswith("published")
    for name, ref in T1_NEAREST.items():
        ratio = PUBLISHED[ref]["ddtree64_t1"] / PUBLISHED[ref]["ddtree64"]
        assert t[name].ddtree64_t1 == pytest.approx(t[name].ddtree64 * ratio, abs=1e-3)


@pytest.mark.parametrize("name", ["gsm8k", "mt-bench"])
def test_fixed_seed_check_reproduces_the_three_targets(name):
    """A small fixed-seed check (900 contexts over three worlds no fit used) lands each of the
    three targets within the tolerance plus two of its own standard errors (the check's
    sampling error at this size is 1-3%, the fit's own evaluation uses 3000 contexts)."""
    target = derive_targets()[name]
    ev = evaluate(get_regime(name), contexts=900, world_seeds=(300, 301, 302),
                  rng=np.random.default_rng(4242), entropy_contexts=0)
    for q in QUANTITIES:
        est, tgt = getattr(ev, q), getattr(target, q)
        assert abs(est.mean - tgt) <= TOLERANCE * tgt + 2 * est.se, (name, q, est, tgt)
        assert len(ev.per_world[q]) == 3


# ---------------------------------------------------------------------- the added knob
def _sharp_world(depth_sharpening: float, **kw):
    spec = dataclasses.replace(get_regime("small"), name="sharp", depth_sharpening=depth_sharpening,
                               **kw)
    return make_world(spec, seed=3)


@pytest.mark.parametrize("s", [-0.7, 0.0, 1.5])
def test_depth_sharpening_powers_the_marginals(s):
    w, w0 = _sharp_world(s), _sharp_world(0.0)
    spec = w.spec
    big_l, v = spec.depth, spec.vocab_size
    for x0 in range(v):
        ctx = Context(1, x0)
        mu = w0.drafter.marginals(1, x0)           # the belief process is unchanged
        np.testing.assert_array_equal(mu, w.drafter.marginals(1, x0))
        lq = w.draft(ctx)
        for d in range(1, big_l + 1):
            beta = 1 + s * (d - 1) / (big_l - 1)
            junk = spec.junk * d / big_l
            p = mu[d - 1] ** beta
            ref = (1 - junk) * p / p.sum() + junk / v
            np.testing.assert_allclose(np.exp(lq[d - 1]), ref, rtol=1e-10, atol=1e-14)
        np.testing.assert_allclose(logsumexp(lq, axis=1), 0.0, atol=1e-12)
        np.testing.assert_array_equal(np.argmax(lq, axis=1), np.argmax(w0.draft(ctx), axis=1))
        # the correction proposal uses the sharpened marginal
        kappa = spec.correction_quality
        for d in range(2, big_l + 1):
            got = w.draft_conditional(ctx, d, 5)
            ref0 = w0.draft_conditional(ctx, d, 5)
            q_sharp, q0 = np.exp(lq[d - 1]), np.exp(w0.draft(ctx)[d - 1])
            np.testing.assert_allclose(got - (1 - kappa) * q_sharp, ref0 - (1 - kappa) * q0,
                                       atol=1e-12)
            assert got.sum() == pytest.approx(1.0, abs=1e-12)


def test_depth_sharpening_validation():
    with pytest.raises(ValueError, match="depth_sharpening"):
        _sharp_world(-1.0)
    with pytest.raises(ValueError, match="depth_sharpening"):
        _sharp_world(float("nan"))
    assert RegimeSpec(name="x", description="", vocab_size=16).depth_sharpening == 0.0


def test_share_target_kernels_requires_the_same_target():
    spec = base_spec("alpaca")
    a = make_world(spec, seed=0)
    b = make_world(dataclasses.replace(spec, variant_noise=0.9), seed=0)
    b.share_target_kernels(a)                     # drafter-only change: allowed
    a.target_kernel(0, 0.0)
    assert b.target_kernel(0, 0.0) is a.target_kernel(0, 0.0)
    with pytest.raises(ValueError, match="different target"):
        make_world(spec, seed=1).share_target_kernels(a)
    with pytest.raises(ValueError, match="different target"):
        make_world(dataclasses.replace(spec, sharpness=3.0), seed=0).share_target_kernels(a)


@pytest.mark.parametrize("regime", ["small", "low-entropy", "chat"])
def test_argmax_marginals_equals_the_argmax_of_the_marginals(regime):
    spec = base_spec("alpaca") if regime == "chat" else get_regime(regime)
    w = make_world(dataclasses.replace(spec, depth_sharpening=0.8), seed=5)
    rng = np.random.default_rng(3)
    for _ in range(40):
        ctx = w.sample_context(rng)
        got = w.drafter.argmax_marginals(ctx.topic, ctx.last_token)
        mu = w.drafter.marginals(ctx.topic, ctx.last_token)
        np.testing.assert_array_equal(got, np.argmax(mu, axis=1))
        np.testing.assert_array_equal(got, np.argmax(w.draft(ctx), axis=1))


# ---------------------------------------------------------------------- the Table-1 fit
def test_table1_targets_are_the_published_cells():
    t = table1_targets()
    assert set(t) == set(CALIBRATED_REGIMES)
    # the 32 cells of DDTree Table 1 (Qwen3-8B), copied from the paper, and TEV's DDTree@64
    table1 = {"math500": (7.79, 10.73, 6.46, 9.54), "gsm8k": (6.57, 9.54, 5.93, 8.95),
              "aime25": (7.39, 9.86, 4.79, 7.71), "humaneval": (6.61, 9.67, 5.48, 8.59),
              "mbpp": (5.99, 9.07, 5.30, 8.34), "livecodebench": (7.22, 10.28, 6.61, 9.53),
              "mt-bench": (4.28, 6.58, 3.77, 6.02), "alpaca": (3.12, 5.09, 2.94, 4.89)}
    tev = {"math500": (9.76, 8.17), "gsm8k": (8.49, 7.84), "humaneval": (8.01, 7.06),
           "mt-bench": (5.54, 5.03)}
    derived = derive_targets()
    for name, cells in t.items():
        assert tuple(cells) == CELLS
        got = tuple(cells[q]["value"] for q in ("chain", "ddtree512", "chain_t1",
                                                 "ddtree512_t1"))
        assert got == table1[name]
        for q in ("chain", "ddtree512", "chain_t1", "ddtree512_t1"):
            assert cells[q]["published"] and cells[q]["weight"] == 1.0
        for q, j in (("ddtree64", 0), ("ddtree64_t1", 1)):
            if name in tev:
                assert cells[q]["published"] and cells[q]["value"] == tev[name][j]
            else:
                assert not cells[q]["published"] and cells[q]["weight"] == DERIVED_WEIGHT
                assert cells[q]["value"] == getattr(derived[name], q)
                assert cells[q]["source"].startswith("derived")
        # the published large tree gains over B = 64 and loses at T = 1
        assert cells["ddtree512"]["value"] > cells["ddtree64"]["value"] > cells["chain"]["value"]
        assert cells["ddtree512_t1"]["value"] < cells["ddtree512"]["value"]
    assert TABLE1["aime25"]["chain_t1"] == 4.79


def test_cell_values_are_the_rounds_of_the_one_loop():
    """The six cells of a context: the chain's and DDTree's exact E[tau] from run_round, DDTree
    read off one nested round at B = 512 (equal to rounds built at B = 64 and B = 512)."""
    spec = dataclasses.replace(get_regime("math500"), hard_miss=0.02)
    w = make_world(spec, seed=9)
    rng = np.random.default_rng(2)
    nodraws = np.random.default_rng(0)
    for _ in range(3):
        ctx = w.sample_context(rng)
        got = cell_values(w, ctx)
        want = []
        for t in (0.0, 1.0):
            want.append(run_round(w, ctx, method="chain", temperature=t, rule="follow",
                                  rng=nodraws, sample=False).expected_tau)
            for b in (64, 512):
                want.append(run_round(w, ctx, method="ddtree", budget=b, temperature=t,
                                      rule="follow", rng=nodraws, sample=False).expected_tau)
        np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-9)
        assert got[0] <= got[1] <= got[2] and got[3] <= got[4] <= got[5]


def test_cell_summary_intervals_and_between_world_spread():
    rng = np.random.default_rng(0)
    # four worlds whose means differ by 0, 1, 2, 3 (s.d. 1.29), with unit noise per context
    base = np.array([10.0, 11.0, 12.0, 13.0])[:, None, None]
    vals = base + rng.standard_normal((4, 400, len(CELLS)))
    summ = CellEvaluation(vals, (0, 1, 2, 3)).summary()
    for j, q in enumerate(CELLS):
        c = summ[q]
        v = vals[:, :, j]
        assert c["mean"] == pytest.approx(v.mean(), abs=1e-4)
        assert c["ci"][0] < c["mean"] < c["ci"][1]
        assert c["n"] == 1600 and len(c["per_world"]) == 4
        # world means spread by sd(0, 1, 2, 3) = 1.291; the contexts' noise adds 1/400 to the
        # variance of each world mean, which the excess removes
        sd_w = np.std(v.mean(axis=1), ddof=1)
        assert c["world_sd_rel"] == pytest.approx(sd_w / v.mean(), abs=1e-4)
        noise = np.mean(v.var(axis=1, ddof=1)) / 400
        assert c["world_sd_excess_rel"] == pytest.approx(
            np.sqrt(sd_w ** 2 - noise) / v.mean(), abs=1e-4)
        assert c["world_sd_excess_rel"] * v.mean() == pytest.approx(1.291, rel=0.25)
        # the between-world interval (3 dof) is wider than the pooled one
        assert c["world_ci"][1] - c["world_ci"][0] > c["ci"][1] - c["ci"][0]
    # no spread beyond the noise: the excess is 0
    flat = CellEvaluation(rng.standard_normal((4, 50, len(CELLS))) + 5.0, (0, 1, 2, 3))
    assert all(flat.summary()[q]["world_sd_excess_rel"] < 0.05 for q in CELLS)


def test_evaluate_cells_arguments():
    spec = base_spec("alpaca")
    with pytest.raises(ValueError, match="per_world"):
        evaluate_cells(spec, per_world=0, world_seeds=(0,), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="world_seeds"):
        evaluate_cells(spec, per_world=1, world_seeds=(), rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        evaluate_cells(spec, per_world=1, world_seeds=(0,), rng=0)
    with pytest.raises(ValueError, match="RegimeSpec"):
        evaluate_cells("alpaca", per_world=1, world_seeds=(0,), rng=np.random.default_rng(0))


def test_table1_fit_keeps_its_best_point(monkeypatch):
    """A tiny fit (one world, two contexts, six evaluations): a Jacobian step from the start,
    knobs inside their bounds, and the returned point the best one it evaluated."""
    from treespec_sim import calibrate

    monkeypatch.setattr(calibrate, "FIT_WORLD_SEEDS", (0,))
    monkeypatch.setattr(calibrate, "REFINE_WORLD_SEEDS", (1,))
    monkeypatch.setattr(calibrate, "REFINE_CONTEXTS_PER_WORLD", 3)
    lines = []
    out = fit_regime_table1("alpaca", per_world=2, max_evals=6, log=lines.append)
    fit = out["fit"]
    # six evaluations of stage 1, then one at its best point and up to two steps on the
    # larger set, whose points alone compete for the result
    assert fit["stage1"]["evaluations"] == 6
    assert 7 <= fit["evaluations"] == len(fit["history"]) <= 9 and len(lines) >= 7
    assert fit["world_seeds"] == [1] and fit["contexts_per_world"] == 3
    assert set(out["fitted"]) == set(FITTED_KNOBS["chat"])
    for k, v in out["fitted"].items():
        lo, hi = calibrate._TABLE1_BOUNDS[k]
        assert lo <= v <= hi
    best = min(fit["history"][6:], key=lambda h: h["cost"])
    assert out["fitted"] == {k: best[k] for k in out["fitted"]}
    # stage 2 starts at stage 1's best point
    first1 = min(fit["history"][:6], key=lambda h: h["cost"])
    assert all(fit["history"][6][k] == pytest.approx(first1[k]) for k in out["fitted"])
    assert fit["cells"] == {q: best[q] for q in CELLS}
    # the first Jacobian moves one knob at a time from the start
    first = fit["history"][0]
    for h in fit["history"][1:5]:
        assert sum(h[k] != first[k] for k in out["fitted"]) == 1


def test_cell_values_are_six_separate_run_rounds():
    """The fit's six cells (nested DDTree read at B = 64 and 512) equal separate exact rounds
    built at each budget, in :data:`CELLS` order."""
    from treespec_sim.calibrate import BEST_BUDGET, BUDGET, CELL_SPECS, CELLS, cell_values
    from treespec_sim.engine import run_round

    world = make_world(get_regime("small"), seed=4)
    ctx = world.sample_context(np.random.default_rng(2))
    got = cell_values(world, ctx)
    want = [run_round(world, ctx, method=m, budget=b, rule="follow", temperature=t,
                      rng=np.random.default_rng(0), sample=False).expected_tau
            for m, b, t in (CELL_SPECS[q] for q in CELLS)]
    assert got == pytest.approx(want, rel=1e-12)
    assert {CELL_SPECS[q][1] for q in CELLS} == {None, BUDGET, BEST_BUDGET}
