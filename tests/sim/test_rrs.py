"""RRS and RRSw on sampled trees: losslessness by exact enumeration, exact E[tau], errors."""

import numpy as np
import pytest
from scipy import stats

from proofs_check.enumerate import (
    draw_tuples,
    extend_law,
    max_law_gap,
    sampled_round_law,
    target_law,
)
from treespec_sim import DraftTree
from treespec_sim.synth import Context, make_world
from treespec_sim.verify import expected_length, verify

EXACT_TOL = 1e-12
SHAPES = {
    "fan2-chain": DraftTree.from_parents([-1, 0, 0, 1, 2], [0, 0, 1, 0, 0]),
    "fan3": DraftTree.from_parents([-1, 0, 0, 0, 1], [0, 0, 1, 2, 0]),
    "deep": DraftTree.from_parents([-1, 0, 1, 1], [0, 0, 0, 1]),
}


def _setup(temperature, seed=1):
    world = make_world("tiny", seed=seed)
    ctx = Context(0, 1)
    log_q = world.draft(ctx)

    def row_fn(path):
        return world.target_row(ctx, path, temperature)

    def proposal_fn(path):  # the drafter's marginal at the children's depth
        return np.exp(log_q[len(path)])

    return world, ctx, row_fn, proposal_fn


@pytest.mark.parametrize("temperature", [1.0, 0.6])
@pytest.mark.parametrize("shape", list(SHAPES))
@pytest.mark.parametrize("replacement", [True, False])
def test_matching_scheme_is_lossless(shape, replacement, temperature):
    world, ctx, row_fn, proposal_fn = _setup(temperature)
    law = sampled_round_law(SHAPES[shape], row_fn, proposal_fn, replacement=replacement,
                            verify_without_replacement=not replacement)
    assert abs(sum(law.values()) - 1) < EXACT_TOL
    got = extend_law(law, row_fn, 3)
    assert max_law_gap(got, target_law(world, ctx, temperature=temperature, n_tokens=3)) \
        < EXACT_TOL


def _first_token_law(law, V):
    out = np.zeros(V)
    for s, prob in law.items():
        out[s[0]] += prob
    return out


@pytest.mark.parametrize("replacement", [True, False])
def test_mismatched_scheme_is_caught(replacement):
    """i.i.d. draws verified as RRSw, and without-replacement draws verified as RRS, are not
    lossless: the same check (first emitted token vs p, 20 random instances at V = 5,
    k in {2, 3}) must flag them, while the matching scheme passes on the same instances."""
    rng = np.random.default_rng(0)
    V = 5
    worst_bad = worst_good = 0.0
    for _ in range(20):
        p, q = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        for k in (2, 3):
            shape = DraftTree.from_parents([-1] + [0] * k, [0, *range(k)])
            for verify_wor, store in ((replacement, "bad"), (not replacement, "good")):
                law = sampled_round_law(shape, lambda path, p=p: p, lambda path, q=q: q,
                                        replacement=replacement,
                                        verify_without_replacement=verify_wor)
                gap = float(np.abs(_first_token_law(law, V) - p).max())
                if store == "bad":
                    worst_bad = max(worst_bad, gap)
                else:
                    worst_good = max(worst_good, gap)
    assert worst_good < EXACT_TOL
    assert worst_bad > 1e-2


def test_draw_tuples_are_laws():
    q = np.array([0.5, 0.3, 0.2, 0.0])
    for replacement in (True, False):
        total = sum(p for _, p in draw_tuples(q, 2, replacement=replacement))
        assert abs(total - 1) < EXACT_TOL


def _sample_tree(rng, shape, proposal_row, replacement):
    """Fill ``shape`` with draws (root children only) and return (tree, proposal)."""
    k = shape.children(0).size
    q = proposal_row
    if replacement:
        toks = rng.choice(q.size, size=k, p=q)
    else:  # Gumbel-top-k gives a sequential sample without replacement, in draw order
        keys = np.log(np.where(q > 0, q, 1e-300)) + rng.gumbel(size=q.size)
        toks = np.argsort(-keys)[:k]
    tree = DraftTree.from_parents_multiset(np.r_[-1, np.zeros(k, int)], np.r_[0, toks])
    return tree


@pytest.mark.parametrize("rule, replacement", [("rrs", True), ("rrsw", False)])
def test_sampled_verify_first_token_follows_target(rule, replacement):
    """End to end through ``verify``: fresh draws every round, the first emitted token is an
    exact target draw (chi-square, false-alarm rate 1e-3), and the mean tau matches the exact
    expected length averaged over the same trees."""
    rng = np.random.default_rng(7)
    V = 6
    p = np.array([0.3, 0.25, 0.2, 0.15, 0.1, 0.0])
    q = np.array([0.1, 0.1, 0.2, 0.2, 0.2, 0.2])
    shape = DraftTree.from_parents([-1, 0, 0, 0], [0, 0, 1, 2])
    counts = np.zeros(V)
    taus, exact = [], []
    n = 6000
    for _ in range(n):
        tree = _sample_tree(rng, shape, q, replacement)
        rows = np.tile(p, (tree.n_nodes, 1))
        proposal = np.tile(q, (tree.n_nodes, 1))
        out = verify(tree, rows, rule=rule, rng=rng, proposal=proposal)
        counts[out.tokens[0]] += 1
        taus.append(out.tau)
        exact.append(expected_length(tree, rows, rule=rule, proposal=proposal))
    assert counts[5] == 0
    assert stats.chisquare(counts[:5], n * p[:5]).pvalue > 1e-3
    diff = np.array(taus) - np.array(exact)
    half = stats.norm.ppf(0.9995) * diff.std(ddof=1) / np.sqrt(n)
    assert abs(diff.mean()) < half


def test_rrs_expected_length_one_level_closed_form():
    """One level, two i.i.d. drafts, hand-computed from the SpecInfer rule."""
    p = np.array([0.5, 0.3, 0.2])
    q = np.array([0.2, 0.2, 0.6])
    tree = DraftTree.from_parents_multiset([-1, 0, 0], [2, 2, 0])
    rows = np.tile(p, (3, 1))
    prop = np.tile(q, (3, 1))
    # step 1 (token 2): a1 = min(1, p/q); residual r1 = norm((p - q)_+); step 2 (token 0)
    a1 = min(1, p[2] / q[2])
    r1 = np.clip(p - q, 0, None)
    r1 /= r1.sum()
    a2 = min(1, r1[0] / q[0])
    want = 1 + a1 + (1 - a1) * a2
    assert abs(expected_length(tree, rows, rule="rrs", proposal=prop) - want) < EXACT_TOL


def test_proposal_errors():
    tree = DraftTree.from_parents([-1, 0, 0], [0, 1, 2])
    rows = np.full((3, 3), 1 / 3)
    good = np.full((3, 3), 1 / 3)
    with pytest.raises(ValueError, match="needs a proposal"):
        verify(tree, rows, rule="rrs", rng=np.random.default_rng(0))
    bad = good.copy()
    bad[0] = [0.5, 0.5, 0.0]
    with pytest.raises(ValueError, match=r"node 2 drafted token 2 with zero proposal mass"):
        expected_length(tree, rows, rule="rrsw", proposal=bad)
    bad = good.copy()
    bad[0] = [0.5, 0.4, 0.0]
    with pytest.raises(ValueError, match=r"proposal\[0\] sums to"):
        expected_length(tree, rows, rule="rrs", proposal=bad)
    with pytest.raises(ValueError, match="shape"):
        expected_length(tree, rows, rule="rrs", proposal=good[:2])
    dup = DraftTree.from_parents_multiset([-1, 0, 0], [0, 1, 1])
    with pytest.raises(ValueError, match="duplicate siblings"):
        expected_length(dup, rows, rule="rrsw", proposal=good)
    assert expected_length(dup, rows, rule="rrs", proposal=good) > 1


def test_draw_tuples_survive_a_nearly_point_mass_proposal():
    # 1 - q[0] rounds to 0 here although q[1], q[2] > 0; the renormaliser must not
    q = np.array([1.0 - 1e-17, 1e-17, 1e-17])
    q = q / q.sum()
    probs = [p for _, p in draw_tuples(q, 3, replacement=False)]
    assert all(np.isfinite(probs))
    assert abs(sum(probs) - 1.0) < 1e-12
