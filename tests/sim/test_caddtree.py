"""CaDDTree, exhaustive and long-run budget rules (docs/theory/caddtree.md)."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proofs_check.budget import THETA_RTOL, find_step_counterexample, theta_by_rebuilding
from proofs_check.reference import caddtree_heap_reference
from proofs_check.strategies import convex_costs, log_q_arrays
from treespec_sim import DraftTree
from treespec_sim.cost import TiledCost, get_cost_model
from treespec_sim.policies import (
    LongRunPolicy,
    budget_curve,
    caddtree,
    ddtree,
    exhaustive_budget_tree,
    first_non_increase,
    longrun_budget,
    longrun_tree,
)


def _lookup(verify):
    return lambda n: verify[np.asarray(n) - 1]


@given(st.data())
def test_caddtree_returns_the_smallest_maximiser_under_convex_costs(data):
    lp = data.draw(log_q_arrays(max_depth=3, max_vocab=4))
    max_budget = data.draw(st.integers(1, 20))
    draft, verify = data.draw(convex_costs(max_budget + 1))
    theta = theta_by_rebuilding(lp, draft, verify, max_budget)
    tree = caddtree(lp, draft_cost=draft, verify_cost=_lookup(verify), max_budget=max_budget)
    # a maximiser; "smallest" up to rounding of gains of a few ulps (see THETA_RTOL)
    assert theta[tree.size] >= theta.max() * (1 - THETA_RTOL)
    assert np.all(theta[: tree.size] < theta[tree.size] * (1 + THETA_RTOL))
    assert tree == (ddtree(lp, tree.size) if tree.size else DraftTree.root_only())
    parent, token = caddtree_heap_reference(lp, draft, _lookup(verify), max_budget)
    k = min(tree.size, len(parent) - 1) + 1
    assert list(tree.parent[:k]) == parent[:k] and list(tree.token[1:k]) == token[1:k]
    assert abs(theta[len(parent) - 1] - theta[tree.size]) <= THETA_RTOL * theta.max()
    exhaustive = exhaustive_budget_tree(lp, draft_cost=draft, verify_cost=_lookup(verify),
                                        max_budget=max_budget)
    # greedy = exhaustive in exact arithmetic; where theta ties to a few ulps (a gain that
    # exactly pays its cost) the argmax may pick another of the tied sizes
    assert exhaustive == tree or (
        exhaustive == ddtree(lp, exhaustive.size)
        and abs(theta[exhaustive.size] - theta[tree.size]) <= THETA_RTOL * theta.max())
    # the trial budget changes the work, never the result
    start = data.draw(st.integers(1, max(1, max_budget)))
    assert caddtree(lp, draft_cost=draft, verify_cost=_lookup(verify), max_budget=max_budget,
                    start_budget=start) == tree


def test_policy_with_a_hint_equals_the_function_every_round():
    from treespec_sim.policies import CaDDTreePolicy

    rng = np.random.default_rng(5)
    cost = get_cost_model("tiled-illustrative")
    policy = CaDDTreePolicy(draft_cost=cost.draft_cost(), verify_cost=cost.verify_cost,
                            max_budget=300)
    for _ in range(6):
        lp = np.log(rng.dirichlet(np.full(50, 0.1), size=6))
        expect = caddtree(lp, draft_cost=cost.draft_cost(), verify_cost=cost.verify_cost,
                          max_budget=300)
        assert policy(lp) == expect
        assert policy.last_budget == expect.size


def test_off_by_one_token_count_is_caught():
    # Looking the cost up with the non-root count (the reference's off-by-one) changes the
    # stop on an instance where the cost rises between n = B and n = B + 1 only.
    lp = np.log(np.array([[0.5, 0.3, 0.2]]))
    verify = np.array([1.0, 1.0, 1.0, 2.0])  # C_v(n) for n = 1..4: a jump at the 4th token
    theta = theta_by_rebuilding(lp, 0.0, verify, 3)
    right = caddtree(lp, draft_cost=0.0, verify_cost=_lookup(verify), max_budget=3)
    shifted = caddtree(lp, draft_cost=0.0,
                       verify_cost=lambda n: verify[np.maximum(np.asarray(n) - 2, 0)],
                       max_budget=3)
    assert right.size == int(np.argmax(theta)) == 2
    assert shifted.size != right.size


def test_flat_cost_grows_while_probability_is_positive():
    with np.errstate(divide="ignore"):
        lp = np.log(np.array([[0.6, 0.4, 0.0], [0.5, 0.5, 0.0]]))
    tree = caddtree(lp, draft_cost=0.1, verify_cost=lambda n: np.ones_like(n, dtype=float),
                    max_budget=50)
    assert tree.size == 6  # every prefix with positive probability, and nothing else


def test_ties_stop():
    # theta(1) == theta(0) exactly: p_1 * D(0) == N(0) * Delta_1 with p_1 = 0.5, D = 1 -> 1.5
    lp = np.log(np.array([[0.5, 0.5]]))
    verify = np.array([1.0, 1.5, 10.0])
    tree = caddtree(lp, draft_cost=0.0, verify_cost=_lookup(verify), max_budget=2)
    assert tree.size == 0


def test_step_cost_counterexample_is_reproduced():
    found = find_step_counterexample()
    assert found is not None
    # The smallest instance: one depth, three equally likely tokens, a cost step every two
    # query tokens. By hand: theta = 1/1.5, (4/3)/1.5, (5/3)/2, 2/2 for B = 0..3.
    assert found.log_q.shape == (1, 3)
    assert found.cost.tile_tokens == 2
    np.testing.assert_allclose(np.exp(found.log_q), 1 / 3)
    np.testing.assert_allclose(found.theta, [2 / 3, 8 / 9, 5 / 6, 1.0], rtol=1e-12)
    assert (found.greedy_budget, found.best_budget) == (1, 3)
    # caddtree stops at the local maximum; the exhaustive rule finds the global one
    kw = {"draft_cost": found.cost.draft_cost(), "verify_cost": found.cost.verify_cost,
          "max_budget": 3}
    assert caddtree(found.log_q, **kw).size == 1
    assert exhaustive_budget_tree(found.log_q, **kw).size == 3


def test_theta_is_not_unimodal_under_a_tiled_cost():
    cost = TiledCost(base_s=0.0, slope_s=0.0, tile_tokens=2, step_s=0.5, draft_s=1.0)
    lp = np.log(np.full((1, 3), 1 / 3))
    curve = budget_curve(lp, draft_cost=cost.draft_cost(), verify_cost=cost.verify_cost,
                         max_budget=3)
    theta = curve.theta
    assert first_non_increase(theta) == 1 and np.argmax(theta) == 3


def test_longrun_rule_maximises_n_minus_lambda_d():
    rng = np.random.default_rng(3)
    p = np.sort(rng.random(30))[::-1] * 0.5
    cost = 1.0 + np.concatenate([[0.0], np.cumsum(np.sort(rng.random(30)) * 0.05)])
    tokens = np.concatenate([[1.0], 1.0 + np.cumsum(p)])
    for lam in (0.1, 1.0, 3.0, 10.0):
        b = longrun_budget(p, cost, lam)
        objective = tokens - lam * cost
        assert b == int(np.argmax(objective))


def test_longrun_policy_tracks_throughput():
    cost = get_cost_model("h200-qwen3-8b")
    policy = LongRunPolicy(draft_cost=cost.draft_cost(), verify_cost=cost.verify_cost,
                           max_budget=256)
    assert policy.lam is None
    lp = np.log(np.full((4, 8), 1 / 8))
    tree = policy(lp, root_token=0)
    d0 = cost.draft_cost() + cost.verify_cost(1)
    assert policy.lam == pytest.approx(1.0 / d0)  # seeded with the autoregressive rate
    policy.observe(5.0, 0.01)
    assert policy.lam == pytest.approx((1.0 + 5.0) / (d0 + 0.01))
    same = longrun_tree(lp, lam=policy.lam, draft_cost=cost.draft_cost(),
                        verify_cost=cost.verify_cost, max_budget=256)
    assert policy(lp).size == same.size
    assert tree.size >= 0
    with pytest.raises(ValueError, match="seconds > 0"):
        policy.observe(1.0, 0.0)


@pytest.mark.parametrize("bad, match", [
    (lambda n: -np.ones_like(n, dtype=float), "finite and >= 0"),
    (lambda n: 1.0 / np.asarray(n, dtype=float), "non-decreasing"),
    (lambda n: np.full(np.shape(n), np.nan), "finite"),
])
def test_bad_costs_are_rejected(bad, match):
    lp = np.log(np.full((2, 3), 1 / 3))
    with pytest.raises(ValueError, match=match):
        caddtree(lp, draft_cost=0.1, verify_cost=bad, max_budget=5)


def test_bad_draft_cost_and_budget():
    lp = np.log(np.full((2, 3), 1 / 3))
    with pytest.raises(ValueError, match="draft_cost"):
        caddtree(lp, draft_cost=-1.0, verify_cost=lambda n: n * 1.0, max_budget=5)
    with pytest.raises(ValueError, match="max_budget"):
        caddtree(lp, draft_cost=0.1, verify_cost=lambda n: n * 1.0, max_budget=-1)


def test_scalar_only_cost_callables_work():
    lp = np.log(np.full((2, 3), 1 / 3))

    def scalar_cost(n: int) -> float:
        if not isinstance(n, int):
            raise TypeError("scalars only")
        return 1.0 + 0.05 * n

    vec = caddtree(lp, draft_cost=0.1, verify_cost=lambda n: 1.0 + 0.05 * np.asarray(n),
                   max_budget=12)
    assert caddtree(lp, draft_cost=0.1, verify_cost=scalar_cost, max_budget=12) == vec
