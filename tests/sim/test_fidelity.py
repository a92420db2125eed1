"""The calibration's fit sets, its seeds and the per-response convention (``calibrate``).

What the fit's second stage measures must be what the held-out evaluation and ``--check``
measure (the same round loop on contexts of the spec's own target); the check's worlds must be
ones no stage of the fit saw; and a decoded response of one round must reproduce the per-round
value of its starting context.
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from treespec_sim import calibrate
from treespec_sim.calibrate import (
    CELL_SPECS,
    CELLS,
    CHECK_CONTEXT_SEED,
    CHECK_WORLD_SEEDS,
    EVAL_CONTEXT_SEED,
    EVAL_WORLD_SEEDS,
    FIT_CONTEXT_SEED,
    FIT_WORLD_SEEDS,
    REFINE_WORLD_SEEDS,
    RESPONSE_CELLS,
    RESPONSE_SEED,
    base_spec,
    cell_values,
    convention,
    convention_table,
    evaluate_cells,
    fit_regime_table1,
    response_means,
)
from treespec_sim.engine import run_round
from treespec_sim.synth import make_world
from treespec_sim.synth.regimes import RegimeSpec


def _small_alpaca(**knobs: float) -> RegimeSpec:
    """The alpaca family on a small vocabulary (fast worlds, same code path)."""
    return dataclasses.replace(base_spec("alpaca", hard_miss=0.05, **knobs), vocab_size=2048,
                               n_topics=4)


def test_check_worlds_and_contexts_are_disjoint_from_every_fit_stage():
    fit_worlds = set(FIT_WORLD_SEEDS) | set(REFINE_WORLD_SEEDS)
    assert not set(CHECK_WORLD_SEEDS) & fit_worlds
    assert not set(EVAL_WORLD_SEEDS) & fit_worlds
    assert not set(CHECK_WORLD_SEEDS) & set(EVAL_WORLD_SEEDS)
    # the fit's two context seeds (stage 1, stage 2) are neither the evaluation's nor the check's
    fit_seeds = {FIT_CONTEXT_SEED, FIT_CONTEXT_SEED + 1}
    assert not fit_seeds & {EVAL_CONTEXT_SEED, CHECK_CONTEXT_SEED, RESPONSE_SEED}
    # the fit's second stage pins the regime's mean over many more worlds than a check holds
    assert len(REFINE_WORLD_SEEDS) >= 4 * len(CHECK_WORLD_SEEDS)


def test_stage_two_set_measures_what_evaluate_cells_measures():
    """The second stage's means are evaluate_cells' on the same worlds and context seed: the
    contexts drawn at the trial's own logit_scale, also after it changes."""
    spec = _small_alpaca()
    seeds = (3, 4)
    fs = calibrate._ExactAlphaFitSet(spec, per_world=3, world_seeds=seeds, context_seed=11)
    for knobs in ({"variant_noise": 0.5, "logit_scale": spec.logit_scale},
                  {"variant_noise": 0.3, "logit_scale": spec.logit_scale * 1.5},
                  {"variant_noise": 0.3, "logit_scale": spec.logit_scale}):
        got = fs.means(knobs)
        want = evaluate_cells(dataclasses.replace(spec, **knobs), per_world=3, world_seeds=seeds,
                              rng=np.random.default_rng(11)).mean
        np.testing.assert_allclose(got, want, rtol=1e-12)
    # the first-stage set keeps its contexts at its own logit_scale: at another one it differs
    # from evaluate_cells (that is what the second stage corrects)
    fs1 = calibrate._CellFitSet(spec, per_world=10, world_seeds=seeds, context_seed=11)
    knobs = {"logit_scale": spec.logit_scale * 3.0}
    got = fs1.means(knobs)
    want = evaluate_cells(dataclasses.replace(spec, **knobs), per_world=10, world_seeds=seeds,
                          rng=np.random.default_rng(11)).mean
    assert not np.allclose(got, want, rtol=1e-9)


def test_warm_start_measures_the_jacobian_and_starts_stage_two_there(monkeypatch):
    """A start with every knob: stage 1 is the first Jacobian only (1 + 4 evaluations), stage 2
    starts at the start itself, and no stage-2 step moves a knob by more than the cap."""
    monkeypatch.setattr(calibrate, "FIT_WORLD_SEEDS", (0,))
    monkeypatch.setattr(calibrate, "REFINE_WORLD_SEEDS", (1, 2))
    monkeypatch.setattr(calibrate, "REFINE_CONTEXTS_PER_WORLD", 2)
    start = {"variant_noise": 0.55, "calibration": 0.7, "hard_miss": 0.05, "logit_scale": 4.9}
    out = fit_regime_table1("alpaca", per_world=2, start=start, log=lambda s: None)
    fit = out["fit"]
    names = list(start)
    assert fit["stage1"]["evaluations"] == 1 + len(names)
    h = fit["history"]
    stage2 = h[fit["stage1"]["evaluations"]:]
    assert all(stage2[0][k] == pytest.approx(start[k], abs=1e-6) for k in names)
    assert 1 <= len(stage2) <= 1 + calibrate.REFINE_STEPS
    assert fit["passes"][-1]["exact_alpha"] is True
    for cur in stage2[1:]:
        for k in names:
            if k == "logit_scale":
                move = abs(np.log(cur[k]) - np.log(stage2[0][k]))
            else:
                move = abs(cur[k] - stage2[0][k])
            # steps are taken from the best point so far, which is stage2[0] or a later one;
            # measured from the start the total stays within REFINE_STEPS capped steps
            assert move <= calibrate.REFINE_STEPS * calibrate._STEP_CAP \
                * calibrate._FD_STEP[k] + 1e-6, (k, cur)


def test_depth_sharpening_bound_is_wider_than_the_old_fit_reached():
    lo, hi = calibrate.KNOB_BOUNDS["depth_sharpening"]
    assert lo > -1.0 and hi > 2.0
    stored = json.loads(calibrate.CALIBRATION_FILE.read_text())["regimes"]
    for name, e in stored.items():
        ds = e["fitted"].get("depth_sharpening")
        if ds is not None:
            assert lo <= ds <= hi, name


def test_one_round_response_is_the_fresh_context_value():
    """With one new token a response is one round, so its mean is that round's exact E[tau] on
    its fresh starting context, the per-round cell of that context (chain and DDTree@512)."""
    spec = _small_alpaca()
    got = response_means(spec, responses_per_world=2, world_seeds=(5, 6),
                         rng=np.random.default_rng(3), n_tokens=1)
    assert got.shape == (2, 2, len(RESPONSE_CELLS), 3)
    assert np.all(got[..., 2] == 1.0)
    rng = np.random.default_rng(3)
    for i, seed in enumerate((5, 6)):
        world = make_world(spec, seed=seed)
        for k in range(2):
            ctx = world.sample_context(rng)
            cells = cell_values(world, ctx)
            for j, q in enumerate(RESPONSE_CELLS):
                assert got[i, k, j, 0] == pytest.approx(cells[CELLS.index(q)], rel=1e-12)
                method, budget, t = CELL_SPECS[q]
                # the sampled outcome consumes the rng as decode's one round does
                rnd = run_round(world, ctx, method=method, budget=budget, rule="follow",
                                temperature=t, rng=rng, sample=True)
                assert got[i, k, j, 1] == rnd.outcome.tau


def test_long_response_rounds_cover_the_tokens():
    """A response of n tokens has at least n / (L + 1) rounds (a round emits at most L + 1) and
    its sampled tau times its rounds reaches n."""
    spec = _small_alpaca()
    got = response_means(spec, responses_per_world=1, world_seeds=(2,),
                         rng=np.random.default_rng(0), n_tokens=200)
    rounds, sampled = got[..., 2], got[..., 1]
    assert np.all(rounds >= 200 / (spec.depth + 1))
    total = sampled * rounds                      # tokens emitted, the last round whole
    assert np.all(total >= 200 - 1e-9) and np.all(total < 200 + spec.depth + 1)


def test_convention_compares_with_the_stored_per_round_means(tmp_path, monkeypatch):
    """convention() reads the held-out per-round cells of the file and sets the per-response
    means beside them; the table has one row per cell."""
    monkeypatch.setattr(calibrate, "EVAL_WORLD_SEEDS", (0, 1))
    data = json.loads(calibrate.CALIBRATION_FILE.read_text())
    entry = data["regimes"]["alpaca"]
    knobs = dict(entry["knobs"], vocab_size=2048, n_topics=4)
    entry["knobs"] = knobs
    path = tmp_path / "cal.json"
    path.write_text(json.dumps({"regimes": {"alpaca": entry}}))
    res = convention(["alpaca"], responses_per_world=2, path=path, n_tokens=40,
                     log=lambda s: None)
    assert set(res["alpaca"]) == set(RESPONSE_CELLS)
    for q, c in res["alpaca"].items():
        assert c["per_round"][0] == entry["table1"]["achieved"][q]["mean"]
        assert c["responses"] == 4
        lo, hi = c["difference"][1], c["difference"][2]
        assert lo <= c["difference"][0] <= hi
        assert c["difference"][0] == pytest.approx(
            c["per_response"][0] / c["per_round"][0] - 1, abs=1e-3)
    table = convention_table(res)
    assert len(table.splitlines()) == 2 + len(RESPONSE_CELLS)
    with pytest.raises(ValueError, match="unknown calibrated regime"):
        convention(["nope"], path=path)
