"""Every family's cell rows equal a recomputation through ``engine.run_round`` (same seeds).

The recomputations here share no code with the families beyond ``run_round`` itself: they
rebuild every budget's tree (the families use the nested-budget fast path), compute their own
means, and draw from the seeds each family documents. The grids here have one world each;
that a cell of several worlds pools exactly its one-world runs is checked in
``tests/sim/test_engine.py``.
"""

import zlib

import numpy as np
import pytest

from treespec_sim.cost import get_cost_model
from treespec_sim.engine import commit, run_round
from treespec_sim.families import (
    CaDDTreeGrid,
    DDTreeGrid,
    RunSettings,
    StochasticGrid,
    StochasticMapGrid,
    VerifierGrid,
    run_cell,
    world_for,
)
from treespec_sim.methods import uses_budget
from treespec_sim.seeds import cell_rng
from treespec_sim.synth import make_world

EXACT = 1e-12


def _rows(cell):
    return {(r.method, r.verifier, r.budget): r
            for r in run_cell(cell, RunSettings(seed=3))}


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_ddtree_family_equals_rebuilt_trees(temperature):
    """The nested fast path (one tree at the largest budget) equals trees rebuilt per budget."""
    grid = DDTreeGrid(("mid-entropy",), methods=("chain", "ddtree", "dynamic"),
                      budgets=(3, 16, 40), temperatures=(temperature,), rounds=6, worlds=1)
    cell = grid.cells()[0]
    rows = _rows(cell)
    world = world_for("mid-entropy", 3)
    rng = cell_rng(3, cell.key)
    got: dict = {}
    for _ in range(grid.rounds):
        ctx = world.sample_context(rng)
        for method, budgets in (("chain", (None,)), ("ddtree", grid.budgets),
                                ("dynamic", grid.budgets)):
            for b in budgets:
                rnd = run_round(world, ctx, method=method, budget=b, rule="follow",
                                temperature=temperature, rng=np.random.default_rng(0),
                                sample=False)
                got.setdefault((method, b), []).append(
                    (rnd.expected_tau, rnd.coverage, *rnd.exits.by_cause.values()))
    for (method, b), values in got.items():
        row = rows[(method, "follow", world.depth if method == "chain" else b)]
        mean = np.mean(values, axis=0)
        assert row.tau_mean == pytest.approx(mean[0], abs=EXACT)
        assert row.coverage_mean == pytest.approx(mean[1], abs=EXACT)
        assert [row.lost_uncovered, row.lost_budget, row.lost_depth_cap] == \
            pytest.approx(mean[2:], abs=EXACT)


def test_caddtree_family_equals_rebuilt_trees_on_decoded_sequences():
    grid = CaDDTreeGrid(("small",), rounds=10, max_budget=24, cost_models=("h200-qwen3-8b",),
                        worlds=1)
    cell = grid.cells()[0]
    rows = {r.budget: r for r in run_cell(cell, RunSettings(seed=3))
            if r.method == "ddtree"}
    world = make_world("small", seed=3)
    rng = np.random.default_rng([3, 7])  # the family's documented stream
    taus: dict = {b: [] for b in rows}
    done = 0
    while done < grid.rounds:
        ctx = world.sample_context(rng)
        for _ in range(min(8, grid.rounds - done)):
            big = run_round(world, ctx, method="ddtree", budget=grid.max_budget, rule="follow",
                            temperature=0.0, rng=rng)
            for b in taus:
                taus[b].append(run_round(world, ctx, method="ddtree", budget=b, rule="follow",
                                         temperature=0.0, rng=np.random.default_rng(0),
                                         sample=False).expected_tau)
            ctx = commit(world, ctx, big)
            done += 1
    for b, t in taus.items():
        assert rows[b].tau_mean == pytest.approx(np.mean(t), abs=EXACT)


def test_stochastic_family_equals_run_round():
    grid = StochasticGrid(("small",), drafters=("corrected",), temperatures=(0.6,),
                          budgets=(6,), methods=("ddtree", "tsubame-rrsw", "tsubame-univer",
                                                 "sampled-chain-corrected"), rounds=5,
                          worlds=1)
    settings = RunSettings(seed=3)
    rows = [r for c in grid.cells() for r in run_cell(c, settings)]
    world = world_for("small", 3, grid.vocab, "corrected")
    ctx_key = "small|corrected|0.6"
    rng_ctx = np.random.default_rng([3, zlib.crc32(ctx_key.encode()), 0])
    contexts = [world.sample_context(rng_ctx) for _ in range(grid.rounds)]
    for r in rows:
        budget = r.budget if uses_budget(r.method) else 0  # chains: the cell of budget 0
        assert r.budget == (budget or world.depth)  # a chain's budget is its L nodes
        rng = np.random.default_rng([3, zlib.crc32(f"{ctx_key}|{budget}|{r.method}".encode())])
        taus = [run_round(world, c, method=r.method, budget=budget or None, temperature=0.6,
                          rng=rng, sample=False).expected_tau for c in contexts]
        assert r.taus == pytest.approx(taus, abs=EXACT)
        assert r.tau_mean == pytest.approx(np.mean(taus), abs=EXACT)


def test_stochastic_map_family_equals_run_round():
    """A map cell's rows: registered methods, the sampled ones at their proposal temperature
    (``options``), on the contexts of world ``make_world(regime with the cell's logit scale and
    correction quality, seed)``, each (method, T_q, kappa) from its own documented stream."""
    from dataclasses import replace

    from treespec_sim.synth import get_regime

    grid = StochasticMapGrid(("small",), logit_scales=(0.5,), proposal_temperatures=(0.8,),
                             correction_qualities=(0.9,), budget=6, rounds=4, worlds=1)
    (cell,) = grid.cells()
    rows = run_cell(cell, RunSettings(seed=3))
    spec = get_regime("small")
    world = make_world(replace(spec, name="small+map", logit_scale=0.5 * spec.logit_scale,
                               correction_quality=0.9), seed=3)
    key = "map|small|0.5|1.0|6"
    rng_ctx = np.random.default_rng([3, zlib.crc32(key.encode()), 0])
    contexts = [world.sample_context(rng_ctx) for _ in range(grid.rounds)]
    assert len(rows) == 6  # chain, ddtree, two marginal and two corrected sampled methods
    for r in rows:
        t_q, kappa = r.proposal_temperature, r.correction_quality
        kappa = 0.9 if kappa is None else kappa  # deterministic rows: the first quality's key
        stream = f"{key}|{r.method}|{t_q!r}|{kappa!r}"
        rng = np.random.default_rng([3, zlib.crc32(stream.encode())])
        taus = [run_round(world, c, method=r.method, budget=6, rule=r.verifier,
                          temperature=1.0, rng=rng, sample=False,
                          options=None if t_q is None else {"proposal_temperature": t_q}
                          ).expected_tau for c in contexts]
        assert r.taus == pytest.approx(taus, abs=EXACT), r.method


def test_verifier_family_equals_run_round():
    grid = VerifierGrid(("small",), shapes=("2x2",), rounds=6, worlds=1)
    cell = grid.cells()[0]
    rows = {(r.method, r.verifier): r for r in run_cell(cell, RunSettings(seed=3))}
    world = make_world("small", seed=3)
    rng = np.random.default_rng(3 + 1)  # the family's documented stream
    got: dict = {}
    for _ in range(grid.rounds):
        ctx = world.sample_context(rng)
        wr = run_round(world, ctx, method="sampled-tree[2x2]", temperature=1.0, rng=rng,
                       sample=False)
        greedy = run_round(world, ctx, method="greedy-tree[2x2]", temperature=1.0, rng=rng,
                           sample=False)
        for rule in ("rrsw", "traversal", "univer", "univer-guided", "univer-fixed"):
            got.setdefault(("sampled-tree[2x2]", rule), []).append(wr.expected_tau_under(rule))
        got.setdefault(("sampled-tree[2x2]+greedy", greedy.rule), []).append(
            greedy.expected_tau)
    for key, taus in got.items():
        assert rows[key].tau_mean == pytest.approx(np.mean(taus), abs=EXACT)


def test_verifier_family_on_tsubame_trees_equals_run_round():
    """``tsubameB`` cells: every rule on the same ``tsubame-rrsw`` tree of each round, gains
    over RRSw and over Traversal the ratios of those means; no Greedy-draft arm."""
    grid = VerifierGrid(("small",), shapes=("tsubame6",), rounds=6, worlds=1)
    cell = grid.cells()[0]
    assert cell.budget == 6
    rows = {(r.method, r.verifier): r for r in run_cell(cell, RunSettings(seed=3))}
    assert not any("greedy" in m for m, _ in rows)
    world = make_world("small", seed=3)
    rng = np.random.default_rng(3 + 1)
    got: dict = {}
    for _ in range(grid.rounds):
        ctx = world.sample_context(rng)
        rnd = run_round(world, ctx, method="tsubame-rrsw", budget=6, rule="rrsw",
                        temperature=1.0, rng=rng, sample=False)
        for rule in ("rrsw", "traversal", "univer", "univer-guided", "univer-fixed"):
            got.setdefault(rule, []).append(rnd.expected_tau_under(rule))
    for rule, taus in got.items():
        row = rows[("tsubame-rrsw[B=6]", rule)]
        assert row.tau_mean == pytest.approx(np.mean(taus), abs=EXACT)
        assert row.rel_to_baseline == pytest.approx(np.mean(taus) / np.mean(got["rrsw"]))
        if rule.startswith("univer"):
            assert row.rel_traversal == pytest.approx(
                np.mean(taus) / np.mean(got["traversal"]))
            assert row.rel_traversal_ci_low <= row.rel_traversal \
                <= row.rel_traversal_ci_high
    with pytest.raises(ValueError, match=r"verifiers\.shapes.*tsubameB"):
        VerifierGrid(("small",), shapes=("tsubame",))


def test_throughput_uses_the_rounds_cost():
    world = make_world("small", seed=0)
    cost = get_cost_model("h200-qwen3-8b")
    ctx = world.sample_context(np.random.default_rng(0))
    rnd = run_round(world, ctx, method="ddtree", budget=5, temperature=0.0,
                    rng=np.random.default_rng(0), cost=cost)
    assert rnd.cost_s == pytest.approx(cost.draft_cost() + float(cost.verify_cost(6)), rel=1e-12)
