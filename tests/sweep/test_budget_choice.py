"""The budget-choice experiment and the sweep's `caddtree` preset (small runs)."""

import numpy as np
import pytest

from treespec_sim import DraftTree
from treespec_sim.cost import RooflineCost, get_cost_model
from treespec_sim.families.caddtree import chosen_budgets, collect, evaluate
from treespec_sim.policies import caddtree, ddtree
from treespec_sim.synth import make_world
from treespec_sim.verify import expected_length


@pytest.fixture(scope="module")
def curves():
    return collect(make_world("small", seed=1), regime="small", rounds=12, max_budget=64,
                   rounds_per_sequence=4, seed=1)


def test_curves_match_the_verifier_on_rebuilt_trees():
    # tau(B) from the nested max-budget tree equals expected_length of ddtree(B) itself
    world = make_world("small", seed=1)
    rng = np.random.default_rng([1, 7])
    ctx = world.sample_context(rng)
    c = collect(world, regime="small", rounds=2, max_budget=40, rounds_per_sequence=2, seed=1)
    log_q = world.draft(ctx)
    for b in (0, 3, 17, 40):
        tree = (ddtree(log_q, b, root_token=int(ctx.last_token)) if b
                else DraftTree.root_only(int(ctx.last_token)))  # B = 0: the root alone
        oracle = world.target_oracle(ctx, tree, 0.0)
        assert c.tau[0, b] == pytest.approx(expected_length(tree, oracle, rule="follow"),
                                            abs=1e-12)


def test_adaptive_rules_match_the_policies(curves):
    cost = get_cost_model("h200-qwen3-8b")
    results = {r.method: r for r in evaluate(curves, cost, grid=(8, 16, 32, 64))}
    assert {"caddtree", "exhaustive", "longrun", "ddtree-oracle", "ddtree@8"} <= set(results)
    # convex cost: the greedy stop is the exhaustive argmax, round by round
    assert results["caddtree"].budget_mean == results["exhaustive"].budget_mean
    oracle = results["ddtree-oracle"]
    assert oracle.throughput == max(results[f"ddtree@{b}"].throughput for b in (8, 16, 32, 64))
    for r in results.values():
        assert r.ci[0] <= r.throughput <= r.ci[1]
        assert r.speedup_vs_ar > 0


def test_caddtree_budget_in_experiment_equals_policy():
    world = make_world("small", seed=2)
    rng = np.random.default_rng([2, 7])  # the experiment's own stream: same first context
    ctx = world.sample_context(rng)
    cost = RooflineCost(0.01, 1e-4, 4, 3e-3, 1e-3)
    c = collect(world, regime="small", rounds=2, max_budget=30, rounds_per_sequence=2, seed=2)
    _, picks = chosen_budgets(c, cost, 0)
    tree = caddtree(world.draft(ctx), draft_cost=cost.draft_cost(0),
                    verify_cost=lambda n: cost.verify_cost(n, 0), max_budget=30)
    assert 0 < tree.size < 30  # the cost makes the choice non-trivial
    assert picks["caddtree"][0] == tree.size


def test_sweep_caddtree_preset_writes_and_resumes(tmp_path):
    from treespec_sim.sweep import main

    out = tmp_path / "run"
    argv = ["--preset", "caddtree", "--regimes", "small", "--rounds", "8", "--out", str(out),
            "--quiet"]
    assert main(argv) == 0
    text = (out / "results.csv").read_text()
    for method in ("ddtree-oracle", "caddtree", "exhaustive", "longrun"):
        assert f",{method}," in text
    assert (out / "throughput_vs_budget.png").stat().st_size > 0
    cell = next((out / "cells").rglob("*.json"))
    stamp = cell.stat().st_mtime_ns
    assert main([*argv, "--resume"]) == 0
    assert cell.stat().st_mtime_ns == stamp  # reused, not recomputed
