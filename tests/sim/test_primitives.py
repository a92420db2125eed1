"""The primitives below the policies: the round cost D(B), prefix trees, path scores.

``D(B) = C_d + C_v(B + 1)`` is written once (:func:`treespec_sim.cost.round_cost`); the
CaDDTree policies' curve, the CaDDTree family's table and the round loop's ``cost_s`` must all
equal it, and the hand-evaluated formula (root included in the token count: an off-by-one would
show with a cost that is not linear).
"""

import numpy as np
import pytest

from treespec_sim import DraftTree, paths, policies, surrogate, tree
from treespec_sim.cost import (
    DEFAULT_CONTEXT_LENGTH,
    TiledCost,
    get_cost_model,
    round_cost,
    round_time,
)
from treespec_sim.engine import run_round
from treespec_sim.families.caddtree import RoundCurves, chosen_budgets
from treespec_sim.policies import budget_curve, ddtree
from treespec_sim.synth import make_world

EXACT = 1e-12


def _log_q(seed: int, L: int = 4, V: int = 12) -> np.ndarray:
    z = np.random.default_rng(seed).normal(size=(L, V)) * 2.0
    return z - np.logaddexp.reduce(z, axis=1, keepdims=True)


def _square(n):
    return 0.01 * np.asarray(n, dtype=np.float64) ** 2


def test_round_cost_by_hand():
    assert round_cost(0.5, _square, 0) == pytest.approx(0.5 + 0.01, abs=EXACT)
    assert round_cost(0.5, _square, 3) == pytest.approx(0.5 + 0.16, abs=EXACT)
    np.testing.assert_allclose(round_cost(0.5, _square, np.arange(4)),
                               [0.51, 0.54, 0.59, 0.66], rtol=0, atol=EXACT)


def test_round_time_is_round_cost_of_the_model():
    cost = get_cost_model("a800-qwen3-8b")
    B = np.arange(0, 300, 7)
    for ell in (512, 4096):
        np.testing.assert_array_equal(
            round_time(cost, B, ell),
            round_cost(cost.draft_cost(ell), lambda n, e=ell: cost.verify_cost(n, e), B))
        want = cost.draft_cost(ell) + np.array([cost.verify_cost(int(b) + 1, ell) for b in B])
        np.testing.assert_allclose(round_time(cost, B, ell), want, rtol=0, atol=EXACT)


@pytest.mark.parametrize("scalar_only", [False, True])
def test_caddtree_curve_cost_is_round_cost(scalar_only):
    cost = TiledCost(base_s=0.01, slope_s=1e-5, tile_tokens=4, step_s=2e-3, draft_s=0.004)
    cv = (lambda n: float(cost.verify_cost(int(n)))) if scalar_only else cost.verify_cost
    curve = budget_curve(_log_q(1), draft_cost=0.004, verify_cost=cv, max_budget=20)
    B = np.arange(curve.tree.size + 1)
    np.testing.assert_array_equal(curve.round_cost, round_cost(0.004, cost.verify_cost, B))
    # by hand: a tile boundary every 4 tokens, root included (B = 3 is 4 tokens, B = 4 is 5)
    d3 = 0.004 + 0.01 + 4e-5 + 2e-3
    d4 = 0.004 + 0.01 + 5e-5 + 2 * 2e-3
    assert curve.round_cost[3] == pytest.approx(d3, abs=EXACT)
    assert curve.round_cost[4] == pytest.approx(d4, abs=EXACT)


def test_caddtree_family_cost_is_round_time():
    cost = get_cost_model("a800-qwen3-8b")
    n = 40
    rng = np.random.default_rng(0)
    q = np.sort(rng.uniform(0, 0.5, size=(3, n)), axis=1)[:, ::-1]
    sur = 1.0 + np.concatenate([np.zeros((3, 1)), np.cumsum(q, axis=1)], axis=1)
    curves = RoundCurves("r", 0.0, sur, sur.copy(), np.zeros(3, dtype=np.int64))
    table, _ = chosen_budgets(curves, cost, 2048)
    np.testing.assert_array_equal(table, round_time(cost, np.arange(n + 1), 2048))


def test_round_cost_s_is_round_time():
    world = make_world("small", seed=2)  # no context_length: the model's default is read
    cost = get_cost_model("a800-qwen3-4b")
    rng = np.random.default_rng(1)
    for budget in (1, 9):
        rnd = run_round(world, world.sample_context(rng), method="ddtree", budget=budget,
                        temperature=0.0, rng=rng, cost=cost, sample=False)
        want = cost.draft_cost(DEFAULT_CONTEXT_LENGTH) + cost.verify_cost(
            rnd.tree_size + 1, DEFAULT_CONTEXT_LENGTH)
        assert rnd.cost_s == pytest.approx(want, abs=EXACT)
        assert rnd.cost_s == float(round_time(cost, rnd.tree_size))


# ---------------------------------------------------------------------------- prefix trees
def test_prefix_tree_keeps_the_first_nodes():
    t = DraftTree.from_parents([-1, 0, 0, 1, 2, 3], [7, 1, 2, 3, 4, 5])
    p = tree.prefix_tree(t, 3)
    assert p == DraftTree.from_parents([-1, 0, 0, 1], [7, 1, 2, 3])
    np.testing.assert_array_equal(p.depth, [0, 1, 1, 2])
    assert tree.prefix_tree(t, 0) == DraftTree.root_only(7)
    assert tree.prefix_tree(t, 9) is t
    assert not p.parent.flags.writeable


@pytest.mark.parametrize("bad", [-1, 1.5, True, "2"])
def test_prefix_tree_refuses_a_bad_budget(bad):
    t = DraftTree.from_parents([-1, 0, 1], [0, 1, 2])
    with pytest.raises(ValueError, match="budget"):
        tree.prefix_tree(t, bad)


def test_prefix_of_a_multiset_tree_knows_its_duplicates():
    t = DraftTree.from_parents_multiset([-1, 0, 0, 0], [0, 4, 5, 4])
    assert t.has_duplicate_siblings
    assert not tree.prefix_tree(t, 2).has_duplicate_siblings  # tokens 4, 5: no repeat
    assert tree.prefix_tree(t, 3).has_duplicate_siblings


def test_ddtree_prefixes_are_smaller_ddtrees():
    lq = _log_q(3)
    big = ddtree(lq, 30)
    for b in (1, 7, 30):
        assert tree.prefix_tree(big, b) == ddtree(lq, b)
    assert tree.prefix_tree(big, 0) == DraftTree.root_only(big.root_token)  # the root alone


# ---------------------------------------------------------------------------- path scores
def test_path_scores_by_hand_and_one_implementation():
    lq = np.log(np.array([[0.5, 0.3, 0.2], [0.6, 0.3, 0.1]]))
    t = DraftTree.from_parents([-1, 0, 0, 1], [9, 0, 1, 2])
    np.testing.assert_allclose(paths.path_probabilities(t, lq), [0.5, 0.3, 0.05],
                               rtol=1e-12)
    np.testing.assert_allclose(np.exp(paths.path_log_scores(t, lq)), [1.0, 0.5, 0.3, 0.05],
                               rtol=1e-12)
    assert surrogate.surrogate_length(t, lq) == pytest.approx(1.85, abs=EXACT)
    # the old public places are the same functions
    assert policies.path_probabilities is paths.path_probabilities
    assert surrogate.path_probabilities is paths.path_probabilities
    assert surrogate.path_log_scores is paths.path_log_scores
    assert policies.prefix_tree is tree.prefix_tree


def test_path_log_scores_checks_depth():
    t = DraftTree.from_parents([-1, 0, 1, 2], [0, 1, 2, 0])
    with pytest.raises(ValueError, match="exceeds log_q's 2 depths"):
        paths.path_log_scores(t, np.log(np.full((2, 3), 1 / 3)))
