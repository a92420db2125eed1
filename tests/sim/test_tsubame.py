"""Sampled policies at T > 0: Tsubame, sampled chains, the dynamic tree, and their guards."""

from collections import Counter

import numpy as np
import pytest
from scipy import stats

from proofs_check.sampled import enumerate_trees
from proofs_check.tsubame import TsubameWorld
from treespec_sim import DraftTree
from treespec_sim.policies import ddtree, tsubame, tsubame_shape
from treespec_sim.policies.dynamic import dynamic_tree
from treespec_sim.policies.sampled import (
    SampledDraft,
    fill_tree,
    marginal_proposal,
    sampled_chain,
    tempered,
)

#: False-alarm rate of each chi-square test below.
ALPHA = 1e-4


def _path_proposal(world: TsubameWorld):
    """Adapt a path-keyed proposal to the package's (depth, parent token) interface: in a
    two-level shape the path to a depth-1 node is its own token."""
    return lambda depth, parent: world.corrected(() if depth == 1 else (parent,))


@pytest.mark.parametrize("scheme", ["iid", "without_replacement"])
def test_fill_tree_draws_the_enumerated_law(scheme):
    rng = np.random.default_rng(11)
    world = TsubameWorld(np.random.default_rng(3), 3, 2)
    shape = DraftTree.from_parents_multiset([-1, 0, 0, 1], [-1, 0, 0, 0])
    exact = {tuple(t.token[1:]): p for t, _, p in
             enumerate_trees(shape, lambda path: world.corrected(path[-1:]), scheme)}
    n = 20000
    seen = Counter()
    for _ in range(n):
        draft = fill_tree(shape, _path_proposal(world), scheme=scheme, rng=rng)
        seen[tuple(draft.tree.token[1:])] += 1
        assert draft.scheme == scheme
    keys = sorted(exact)
    assert set(seen) <= set(exact)
    observed = np.array([seen[k] for k in keys])
    expected = np.array([exact[k] for k in keys]) * n
    assert stats.chisquare(observed, expected).pvalue > ALPHA


def test_fill_tree_records_the_exact_proposal_of_every_inner_node():
    world = TsubameWorld(np.random.default_rng(4), 4, 2)
    shape = DraftTree.from_parents_multiset([-1, 0, 0, 1, 1], [-1, 0, 0, 0, 0])
    draft = fill_tree(shape, _path_proposal(world), scheme="without_replacement",
                      rng=np.random.default_rng(0), temperature=0.7)
    t = draft.tree
    np.testing.assert_allclose(draft.proposal[0], tempered(world.corrected(()), 0.7))
    np.testing.assert_allclose(draft.proposal[1], tempered(world.corrected((t.token[1],)), 0.7))
    assert not draft.proposal[2].any()  # a leaf: never read


def test_tsubame_at_t0_is_ddtree_and_follows():
    rng = np.random.default_rng(0)
    lp = np.log(rng.dirichlet(np.full(30, 0.3), size=5))
    draft = tsubame(lp, 40, rng=rng, temperature=0.0, root_token=7)
    assert draft.proposal is None and draft.scheme == "deterministic"
    # same node set (pass 2 numbers nodes breadth-first, DDTree in pop order)
    assert set(draft.tree.paths()) == set(ddtree(lp, 40, root_token=7).paths())
    draft.check_rule("follow")
    with pytest.raises(ValueError, match="does not match"):
        draft.check_rule("rrsw")


def test_sampled_chain_at_t0_is_the_argmax_chain():
    lp = np.log(np.random.default_rng(1).dirichlet(np.ones(9), size=4))
    draft = sampled_chain(marginal_proposal(lp), 4, rng=np.random.default_rng(0),
                          temperature=0.0)
    assert list(draft.tree.token[1:]) == list(np.argmax(lp, axis=1))


def test_planner_tempered_differs_from_ddtree_below_t1():
    lp = np.log(np.random.default_rng(2).dirichlet(np.full(20, 0.5), size=5))
    a = tsubame_shape(lp, 30, planner="ddtree")
    b = tsubame_shape(lp, 30, planner="tempered", temperature=0.5)
    assert a.size == b.size == 30
    assert a == tsubame_shape(lp, 30, planner="tempered", temperature=1.0)
    assert not np.array_equal(a.depth, b.depth)  # a sharper plan is deeper


def test_width_beyond_support_is_capped_or_rejected():
    q = np.array([0.5, 0.5, 0.0, 0.0])
    shape = DraftTree.from_parents_multiset([-1, 0, 0, 0, 3], [-1, 0, 0, 0, 0])
    draft = fill_tree(shape, lambda d, a: q, scheme="without_replacement",
                      rng=np.random.default_rng(0))
    assert draft.tree.size == 2  # the third child and its subtree are dropped before drawing
    with pytest.raises(ValueError, match="exceeds the proposal's support"):
        fill_tree(shape, lambda d, a: q, scheme="without_replacement",
                  rng=np.random.default_rng(0), cap_to_support=False)
    iid = fill_tree(shape, lambda d, a: q, scheme="iid", rng=np.random.default_rng(0))
    assert iid.tree.size == 4  # i.i.d. draws may repeat


def test_rule_and_temperature_mismatches_are_clear_errors():
    draft = SampledDraft(DraftTree.root_only(), np.zeros((1, 3)), "iid", 0.6)
    with pytest.raises(ValueError, match="does not match 'iid' draws"):
        draft.check_rule("rrsw")
    with pytest.raises(ValueError, match="temperature mismatch"):
        draft.check_rule("rrs", target_temperature=1.0)
    draft.check_rule("rrs", target_temperature=0.6)
    with pytest.raises(ValueError, match="temperature"):
        tempered([0.5, 0.5], 0.0)


def test_dynamic_tree_is_a_prefix_closed_top_k_beam():
    rng = np.random.default_rng(3)
    lp = np.log(rng.dirichlet(np.full(40, 0.3), size=6))
    for budget in (1, 10, 50):
        t = dynamic_tree(lp, budget, top_k=4)
        assert t.size == budget
        # every depth uses at most top_k distinct tokens, all from that depth's top-k
        for d in range(1, t.max_depth + 1):
            toks = set(t.token[t.depth == d].tolist())
            assert toks <= set(np.argsort(-lp[d - 1])[:4].tolist())
    wide = dynamic_tree(lp, 30, top_k=30)
    assert set(wide.paths()) == set(ddtree(lp, 30).paths())
    with pytest.raises(ValueError, match="top_k"):
        dynamic_tree(lp, 5, top_k=0)


def test_stochastic_family_runs_from_a_config(tmp_path):
    from treespec_sim.sweep import main

    cfg = tmp_path / "grid.toml"
    cfg.write_text('[stochastic]\nregimes = ["small"]\ntemperatures = [0.0, 1.0]\n'
                   'budgets = [8]\nrounds = 4\n')
    out = tmp_path / "st"
    assert main(["--config", str(cfg), "--out", str(out), "--quiet"]) == 0
    text = (out / "results.csv").read_text()
    for method in ("chain", "ddtree", "tsubame-rrsw", "sampled-chain-corrected"):
        assert f",{method}," in text
    assert (out / "tau_vs_temperature.png").stat().st_size > 0
