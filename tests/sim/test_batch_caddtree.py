"""One budget across a batch: ``batch_caddtree`` (docs/theory/batch_caddtree.md)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proofs_check import budget
from proofs_check.budget import (
    BATCH_STEP_INSTANCE,
    THETA_RTOL,
    batch_instances,
    batch_step_loss,
    batch_vector_table,
)
from proofs_check.strategies import convex_costs, log_q_arrays
from treespec_sim import DraftTree
from treespec_sim.cost import get_cost_model
from treespec_sim.policies import (
    batch_budget_curve,
    batch_caddtree,
    batch_exhaustive,
    caddtree,
    ddtree,
)
from treespec_sim.surrogate import surrogate_length


def _lookup(verify):
    return lambda n: verify[np.asarray(n) - 1]


def _theta(trees, lps, draft, verify) -> float:
    tokens = sum(surrogate_length(t, lp) for t, lp in zip(trees, lps, strict=True))
    return tokens / (draft + verify[sum(t.size + 1 for t in trees) - 1])


def test_batch_caddtree_attains_the_exhaustive_maximum_over_budget_vectors():
    """60 batches of 1-3 requests under convex costs: every budget vector enumerated, each
    request's tree rebuilt at each of its budgets; the shared stop reaches the maximum."""
    sizes = []
    for lps, draft, verify, m in batch_instances(np.random.default_rng(47), 60):
        vectors, tokens = batch_vector_table(lps, m)
        theta = tokens / (draft + verify[vectors.sum(axis=1) + len(lps) - 1])
        trees = batch_caddtree(lps, draft_cost=draft, verify_cost=_lookup(verify),
                               max_budget=m)
        assert _theta(trees, lps, draft, verify) >= theta.max() * (1 - THETA_RTOL)
        for t, lp in zip(trees, lps, strict=True):
            assert t == (ddtree(lp, t.size) if t.size else DraftTree.root_only())
            assert t.size <= m
        sizes.append(len(lps))
    assert len(sizes) >= 40 and set(sizes) == {1, 2, 3}


def test_the_union_is_optimal_for_every_total():
    for lps, draft, verify, m in batch_instances(np.random.default_rng(7), 40):
        vectors, tokens = batch_vector_table(lps, m)
        totals = vectors.sum(axis=1)
        curve = batch_budget_curve(lps, draft_cost=draft, verify_cost=_lookup(verify),
                                   max_budget=m)
        best = [tokens[totals == n].max() for n in range(int(totals.max()) + 1)]
        np.testing.assert_allclose(curve.expected_tokens, best, rtol=0, atol=1e-12)
        # every prefix of the union is a prefix of every request's own pops
        assert np.all(np.diff(curve.p) <= 0)
        for k in range(curve.p.size + 1):
            assert curve.budgets(k).sum() == k


@given(st.data())
def test_a_batch_of_one_is_caddtree_tree_for_tree(data):
    lp = data.draw(log_q_arrays(max_depth=4, max_vocab=5))
    max_budget = data.draw(st.integers(1, 30))
    draft, verify = data.draw(convex_costs(max_budget + 1))
    kw = {"draft_cost": draft, "verify_cost": _lookup(verify), "max_budget": max_budget}
    (tree,) = batch_caddtree([lp], **kw)
    assert tree == caddtree(lp, **kw)
    (tree,) = batch_exhaustive([lp], **kw)
    assert tree.size <= max_budget


@pytest.mark.parametrize("cost", ["a800-qwen3-8b", "h200-qwen3-8b", "tiled-illustrative"])
def test_a_batch_of_one_is_caddtree_on_dflash_like_marginals(cost):
    model = get_cost_model(cost)
    rng = np.random.default_rng(3)
    for scale in (8.0, 3.0, 1.0):
        logits = rng.standard_normal((16, 2048)) * np.linspace(scale, 0.5, 16)[:, None]
        lp = logits - np.logaddexp.reduce(logits, axis=1, keepdims=True)
        kw = {"draft_cost": model.draft_cost(), "verify_cost": model.verify_cost,
              "max_budget": 511}
        (tree,) = batch_caddtree([lp], root_tokens=[7], **kw)
        assert tree == caddtree(lp, root_token=7, **kw)


def test_a_tiled_cost_makes_the_greedy_stop_lose():
    """The witness of docs/theory/batch_caddtree.md, computed by hand there: theta(k) = 4/3,
    5/4, 3/2, 7/5, 8/5 for k = 0..4 nodes in all; the stop is k = 0, the best k = 4."""
    lps, cost = BATCH_STEP_INSTANCE
    kw = {"draft_cost": cost.draft_cost(), "verify_cost": cost.verify_cost, "max_budget": 4}
    curve = batch_budget_curve(lps, **kw)
    np.testing.assert_allclose(curve.theta, [4 / 3, 5 / 4, 3 / 2, 7 / 5, 8 / 5], rtol=1e-12)
    assert [t.size for t in batch_caddtree(lps, **kw)] == [0, 0]
    assert [t.size for t in batch_exhaustive(lps, **kw)] == [2, 2]
    loss, greedy, best = batch_step_loss(lps, cost, 4)
    assert (greedy, best) == (0, 4)
    assert loss == pytest.approx(1 / 6, rel=1e-12)   # the gap exists: 1 - (4/3) / (8/5)


def test_the_exhaustive_check_catches_a_wrong_allocation(monkeypatch):
    """The proofs_check row can fail: a rule that gives every request one node loses."""
    monkeypatch.setattr(budget, "batch_caddtree",
                        lambda lps, **kw: [ddtree(lp, 1) for lp in lps])
    n, worst = budget.batch_greedy_is_exhaustive(np.random.default_rng(0), 1)
    assert n == 20 and worst > 1e-3


def test_ties_across_requests_go_to_the_smaller_index():
    lp = np.log(np.array([[0.5, 0.5]]))
    curve = batch_budget_curve([lp, lp, lp], draft_cost=1.0, verify_cost=lambda n: 0.0 * n,
                               max_budget=2)
    assert curve.owner.tolist() == [0, 0, 1, 1, 2, 2]


def test_requests_may_differ_in_depth_and_vocabulary():
    a = np.log(np.array([[0.7, 0.2, 0.1]]))
    b = np.log(np.array([[0.6, 0.4], [0.9, 0.1], [0.5, 0.5]]))
    trees = batch_caddtree([a, b], draft_cost=0.5, verify_cost=lambda n: 1.0 + 0.01 * n,
                           max_budget=8, root_tokens=[2, 1])
    assert [t.root_token for t in trees] == [2, 1]
    assert trees[0] == ddtree(a, trees[0].size, root_token=2)
    assert trees[1] == ddtree(b, trees[1].size, root_token=1)


@pytest.mark.parametrize("kwargs, match", [
    ({"log_qs": []}, "log_qs must hold at least one request"),
    ({"log_qs": "abc"}, "log_qs must be a sequence"),
    ({"log_qs": [np.log([[0.5, 0.5]]), np.array([[0.3, 0.2]])]}, r"log_qs\[1\]"),
    ({"root_tokens": [0]}, "root_tokens must hold one token per request"),
    ({"root_tokens": [0, 5]}, r"root_tokens\[1\] = 5 is outside the vocabulary"),
    ({"max_budget": 0}, "max_budget must be a positive integer"),
    ({"draft_cost": -1.0}, "draft_cost must be finite"),
    ({"verify_cost": lambda n: 10.0 - np.asarray(n)}, "verify_cost must be non-decreasing"),
])
def test_bad_input_is_named(kwargs, match):
    args = {"log_qs": [np.log([[0.5, 0.5]])] * 2, "draft_cost": 1.0,
            "verify_cost": lambda n: 1.0 + 0.1 * np.asarray(n), "max_budget": 3, **kwargs}
    with pytest.raises(ValueError, match=match):
        batch_caddtree(args.pop("log_qs"), **args)
