import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats

from proofs_check.enumerate import exit_round_law, follow_round_law_bruteforce
from proofs_check.strategies import trees_with_rows
from treespec_sim import DraftTree
from treespec_sim.exits import (
    EXIT_CAUSES,
    coverage,
    decompose_from_edges,
    edge_probabilities,
    exit_decomposition,
    exit_from_edges,
    exit_law,
    reach_from_edges,
    reach_probabilities,
)
from treespec_sim.verify import expected_length, verify

TOL = 1e-12  # exact float64 paths


@given(trees_with_rows(max_nodes=10, vocab=3))
def test_exit_law_is_a_distribution(tr):
    tree, rows = tr
    w = exit_law(tree, rows)
    assert np.all(w >= 0) and abs(w.sum() - 1) < TOL


@given(trees_with_rows(max_nodes=10, vocab=3))
def test_reach_is_product_along_path(tr):
    tree, rows = tr
    reach = reach_probabilities(tree, rows)
    for v in range(1, tree.n_nodes):
        nodes = tree.path_nodes(v)
        prod = 1.0
        prev = 0
        for u in nodes:
            prod *= rows[prev, tree.token[u]]
            prev = u
        assert abs(reach[v] - prod) < TOL
    assert reach[0] == 1.0


@given(trees_with_rows(max_nodes=10, vocab=3), st.sampled_from(["follow", "tev"]))
def test_coverage_bound_saturated(tr, rule):
    """TEV Thm 1 / Cor. 1: follow and TEV attain E[tau] = 1 + C_p(T)."""
    tree, rows = tr
    assert abs(expected_length(tree, rows, rule=rule) - (1 + coverage(tree, rows))) < 1e-12


@given(trees_with_rows(max_nodes=5, vocab=3))
def test_follow_law_equals_exit_law(tr):
    """Enumerating all joint pre-draws of follow gives TEV's exit-law emission law."""
    tree, rows = tr
    a = follow_round_law_bruteforce(tree, rows)
    b = exit_round_law(tree, rows)
    for k in set(a) | set(b):
        assert abs(a.get(k, 0) - b.get(k, 0)) < TOL
    # the expected length computed from the enumerated law
    assert abs(sum(p * len(s) for s, p in a.items())
               - expected_length(tree, rows, rule="follow")) < TOL


@given(trees_with_rows(max_nodes=10, vocab=4), st.integers(2, 6))
def test_decomposition_adds_up(tr, limit):
    tree, rows = tr
    limit = max(limit, tree.max_depth)
    dec = exit_decomposition(tree, rows, depth_limit=limit)
    w = exit_law(tree, rows)
    by_depth = np.bincount(tree.depth, weights=w, minlength=limit + 1)
    assert np.allclose(dec.by_depth, by_depth, atol=TOL, rtol=0)
    assert abs(sum(dec.by_cause.values()) - 1) < TOL
    leaf = tree.is_leaf()
    assert abs(dec.by_cause["uncovered"] - w[~leaf].sum()) < TOL
    assert abs(dec.by_cause["depth_cap"] - w[leaf & (tree.depth == limit)].sum()) < TOL


def _example():
    rng = np.random.default_rng(11)
    V = 6
    # depth-3 tree with branching: root -> {0,1,2}, 0 -> {3,4}, 3 -> {5}, 1 -> {0}
    tree = DraftTree.from_parents([-1, 0, 0, 0, 1, 1, 4, 2], [9, 0, 1, 2, 3, 4, 5, 0])
    rows = rng.dirichlet(np.full(V, 0.5), size=tree.n_nodes)
    return tree, rows


def test_coverage_matches_monte_carlo():
    """Coverage = expected longest in-tree prefix of a target continuation (99.9% CI)."""
    tree, rows = _example()
    rng = np.random.default_rng(0)
    child = {(int(tree.parent[v]), int(tree.token[v])): v for v in range(1, tree.n_nodes)}
    depths = []
    for _ in range(20000):
        v, d = 0, 0
        while True:
            y = rng.choice(rows.shape[1], p=rows[v])
            if (v, y) not in child:
                break
            v, d = child[(v, y)], d + 1
        depths.append(d)
    depths = np.array(depths)
    half = stats.norm.ppf(0.9995) * depths.std(ddof=1) / np.sqrt(depths.size)
    assert abs(depths.mean() - coverage(tree, rows)) < half


@pytest.mark.parametrize("rule", ["follow", "tev"])
def test_verify_outcomes_match_exact_law(rule):
    """Sampled outcomes vs the exact emission law: chi-square, false-alarm rate 1e-3."""
    tree, rows = _example()
    law = exit_round_law(tree, rows)
    rng = np.random.default_rng(1)
    n = 20000
    counts: dict = {}
    taus = []
    for _ in range(n):
        out = verify(tree, rows, rule=rule, rng=rng)
        counts[out.tokens] = counts.get(out.tokens, 0) + 1
        taus.append(out.tau)
        assert out.tokens[:-1] == tuple(int(tree.token[v]) for v in out.path)
    assert set(counts) <= set(law)
    keys = sorted(law)
    expected = np.array([law[k] * n for k in keys])
    observed = np.array([counts.get(k, 0) for k in keys])
    big = expected >= 5  # pool small cells
    obs = np.append(observed[big], observed[~big].sum())
    exp = np.append(expected[big], expected[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp).pvalue > 1e-3
    taus = np.array(taus)
    half = stats.norm.ppf(0.9995) * taus.std(ddof=1) / np.sqrt(n)
    assert abs(taus.mean() - expected_length(tree, rows, rule=rule)) < half


def test_buggy_bonus_is_caught():
    """A TEV whose bonus ignores the residual emits covered tokens as bonuses: not lossless.

    The check used for the real rules must be able to fail.
    """
    tree, rows = _example()
    good = follow_round_law_bruteforce(tree, rows)
    bad = exit_round_law(tree, rows, residual=False)
    assert max(abs(good.get(k, 0) - bad.get(k, 0)) for k in set(good) | set(bad)) > 1e-3


def test_t0_rows_are_deterministic():
    tree = DraftTree.from_parents([-1, 0, 1], [0, 1, 2])
    rows = np.eye(3)[[1, 2, 0]]
    assert expected_length(tree, rows, rule="follow") == 3.0
    out = verify(tree, rows, rule="follow", rng=np.random.default_rng(0))
    assert out.path == (1, 2) and out.bonus == 0 and out.tokens == (1, 2, 0)


@pytest.mark.parametrize("rows, match", [
    (np.array([[0.5, 0.5], [0.7, 0.2]]), r"target_rows\[1\] sums to 0\.(9|8999)"),
    (np.array([[0.5, 0.5], [1.2, -0.2]]), r"target_rows\[1, 1\] = -0.2 is negative"),
    (np.array([[0.5, np.nan], [0.5, 0.5]]), r"target_rows\[0, 1\] = nan is not finite"),
    (np.array([[0.5, 0.5]]), r"1 rows but the tree has 2 nodes"),
])
def test_bad_target_rows(rows, match):
    tree = DraftTree.from_parents([-1, 0], [0, 1])
    for fn in (lambda: exit_law(tree, rows), lambda: coverage(tree, rows),
               lambda: expected_length(tree, rows, rule="tev"),
               lambda: verify(tree, rows, rule="follow", rng=np.random.default_rng(0))):
        with pytest.raises(ValueError, match=match):
            fn()


def test_bad_rule_and_proposal():
    tree = DraftTree.from_parents([-1, 0], [0, 1])
    rows = np.full((2, 2), 0.5)
    with pytest.raises(ValueError,
                       match=r"unknown rule 'rrsx'; known rules: block, follow, rrs, rrsw, "
                             r"sample-match"):
        verify(tree, rows, rule="rrsx", rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="takes no proposal"):
        expected_length(tree, rows, rule="follow", proposal=rows)
    with pytest.raises(ValueError, match="rng"):
        verify(tree, rows, rule="tev", rng=0)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        coverage(DraftTree.from_parents([-1, 0], [0, 5]), rows)


@given(trees_with_rows())
def test_decomposition_table_is_the_add_at_sum_bit_for_bit(tr):
    """The by-depth-cause table (a bincount, issue 23) equals the np.add.at sum exactly."""
    tree, rows = tr
    limit = tree.max_depth + 1
    edges = edge_probabilities(tree, rows)
    got = decompose_from_edges(tree, edges, depth_limit=limit).by_depth_cause
    _, w = exit_from_edges(tree, edges)
    leaf = tree.is_leaf()
    cause = np.where(leaf, 1, 0)
    cause[leaf & (tree.depth == limit)] = 2
    ref = np.zeros((limit + 1, len(EXIT_CAUSES)))
    np.add.at(ref, (tree.depth, cause), w)
    assert np.array_equal(got, ref)


@pytest.mark.parametrize("n_nodes", [40, 160, 161, 700])
def test_reach_is_the_product_down_each_path_on_both_sides_of_the_loop_size(n_nodes):
    """reach_from_edges walks small trees node by node and large ones level by level: the
    same products, bit for bit, as multiplying each path's edges from the root."""
    rng = np.random.default_rng(n_nodes)
    parent = [-1] + [int(rng.integers(0, v)) for v in range(1, n_nodes)]
    tree = DraftTree.from_parents(parent, list(range(n_nodes)))   # distinct sibling tokens
    edges = rng.random(n_nodes)
    edges[0] = 1.0
    want = np.ones(n_nodes)
    for v in range(1, n_nodes):
        path, u = [], v
        while u > 0:
            path.append(u)
            u = int(tree.parent[u])
        acc = 1.0
        for u in reversed(path):
            acc *= edges[u]
        want[v] = acc
    got = reach_from_edges(tree, edges)
    assert got.dtype == np.float64 and np.array_equal(got, want)
