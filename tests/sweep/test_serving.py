"""The serving family: its rules on curves are the policies' rules on trees, its batches are
disjoint, its oracle is the best fixed budget, and a small run goes through the sweep."""

from __future__ import annotations

import numpy as np
import pytest

from treespec_sim import synth
from treespec_sim.cost import batch_costs, get_cost_model
from treespec_sim.engine import run_round
from treespec_sim.families import serving
from treespec_sim.families.base import RunSettings
from treespec_sim.policies import batch_caddtree, caddtree, independent_caddtree, tetris_chains

COST = "h200-qwen3-8b-batch"


@pytest.fixture(scope="module")
def world():
    return synth.make_world("mid-entropy", seed=3, vocab_size=256)


def _requests(world, n, max_budget, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        ctx = world.sample_context(rng)
        rnd = run_round(world, ctx, method="ddtree", budget=max_budget, nested=True,
                        rule="follow", temperature=0.0, sample=False, rng=rng)
        ch = run_round(world, ctx, method="chain", rule="follow", temperature=0.0,
                       sample=False, rng=rng)
        out.append((np.asarray(rnd.log_q), rnd.path_probabilities, ch.path_probabilities))
    return out


@pytest.mark.parametrize("b", [1, 3, 8])
def test_rules_on_curves_are_the_policies_on_trees(world, b):
    """The family allocates from each request's pop probabilities; the policies build trees from
    its log-marginals: the same budgets, request for request."""
    max_budget = 48
    reqs = _requests(world, b, max_budget, seed=b)
    cd, cv = batch_costs(get_cost_model(COST), [1024.0] * b)
    log_qs = [lq for lq, _, _ in reqs]
    sur = np.stack([np.pad(p, (0, max_budget - p.size)) for _, p, _ in reqs])
    shared = serving.allocate("batch-caddtree", sur, cd, cv)
    assert [t.size for t in batch_caddtree(log_qs, draft_cost=cd, verify_cost=cv,
                                           max_budget=max_budget)] == list(shared)
    each = serving.allocate("caddtree-each", sur, cd, cv)
    assert [t.size for t in independent_caddtree(log_qs, draft_cost=cd, verify_cost=cv,
                                                 max_budget=max_budget)] == list(each)
    chains = np.stack([s for _, _, s in reqs])
    got = serving.allocate("batch-chains", chains, cd, cv)
    assert [t.size for t in tetris_chains(log_qs, draft_cost=cd, verify_cost=cv)] == list(got)
    if b == 1:
        assert shared[0] == caddtree(log_qs[0], draft_cost=cd, verify_cost=cv,
                                     max_budget=max_budget).size


def test_batches_are_disjoint_and_mixed_ones_alternate():
    rng = np.random.default_rng(0)
    one = serving.batches_of([50], 8, rng, mixed=False)
    assert one.shape == (6, 8) and np.unique(one).size == one.size and one.max() < 50
    mixed = serving.batches_of([40, 30], 4, rng, mixed=True)
    assert mixed.shape == (15, 4) and np.unique(mixed).size == mixed.size
    assert (mixed[:, ::2] < 40).all() and (mixed[:, 1::2] >= 40).all()


def test_a_small_cell_through_the_family(world):
    g = serving.ServingGrid(("mid-entropy", "low-entropy"), temperatures=(0.0,),
                            batch_sizes=(1, 4), rounds=16, worlds=2, max_budget=32)
    (cell,) = g.cells()
    rows = serving.run(cell, RunSettings(seed=0))
    comps = {r.regime for r in rows}
    assert comps == {"mid-entropy", "low-entropy", serving.MIXED}
    for comp in comps:
        for b in (1, 4):
            here = [r for r in rows if r.regime == comp and r.batch_size == b]
            fixed = [r for r in here if r.method == "ddtree"]
            oracle = next(r for r in here if r.method == "ddtree-oracle")
            # the oracle is the best fixed budget on these batches, and its own baseline
            assert oracle.throughput_tok_s == max(r.throughput_tok_s for r in fixed)
            assert oracle.rel_to_baseline == pytest.approx(1.0)
            assert {r.method for r in here} >= set(serving.RULES)
            if b == 1:  # one request: the shared budget is the request's own CaDDTree
                sh = next(r for r in here if r.method == "batch-caddtree")
                ea = next(r for r in here if r.method == "caddtree-each")
                assert sh.throughput_tok_s == pytest.approx(ea.throughput_tok_s)
    mixed = [r for r in rows if r.regime == serving.MIXED and r.batch_size == 4]
    assert all(set(r.regime_tok_s) == {"mid-entropy", "low-entropy"} for r in mixed)


def test_grid_refuses_bad_settings():
    with pytest.raises(ValueError, match=r"serving\.batch_sizes"):
        serving.ServingGrid(("mid-entropy", "low-entropy"), batch_sizes=(0,))
    with pytest.raises(ValueError, match="largest batch size"):
        serving.ServingGrid(("mid-entropy", "low-entropy"), batch_sizes=(64,), rounds=32)
    with pytest.raises(ValueError, match="mixed needs at least two regimes"):
        serving.ServingGrid(("mid-entropy",))
