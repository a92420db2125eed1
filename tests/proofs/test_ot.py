"""Single-node multi-draft verification as optimal transport (``proofs_check.ot``).

The LP optimum (cvxpy) is checked against the min-cut closed form over all token subsets, the
ratio-sorted prefix form, the k = 1 maximal coupling and the worked values of
``shared/research/verification_theory.md`` §9; RRS / RRSw are checked lossless by exact
enumeration of ordered draft tuples and bounded by the optima; the draft-set law is checked
against tuple enumeration and a Monte Carlo (Gumbel-top-k) sample.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from proofs_check.ot import (
    LP_TOL,
    draft_set_law,
    optimal_acceptance,
    optimal_acceptance_sorted,
    optimal_acceptance_subsets,
    rrs_acceptance,
    rrsw_acceptance,
)
from proofs_check.strategies import prob_vectors

EXACT_TOL = 1e-9  # closed forms and enumerations (pure float64 arithmetic)


# ----------------------------------------------------------------------------- strategies


@st.composite
def instances(draw, max_vocab: int = 5, max_k: int = 3, *, replacement: bool):
    """``(p, q, k)``; p and q may contain exact zeros; without replacement ``k <= |supp q|``."""
    vocab = draw(st.integers(1, max_vocab))
    p = draw(prob_vectors(vocab, zeros=draw(st.booleans())))
    q = draw(prob_vectors(vocab, zeros=draw(st.booleans())))
    k_hi = max_k if replacement else min(max_k, int(np.count_nonzero(q)))
    return p, q, draw(st.integers(1, k_hi))


# ----------------------------------------------------------------------------- brute force


def tuple_law(q: np.ndarray, k: int, replacement: bool) -> dict[tuple[int, ...], float]:
    """Law of the ordered draft tuple, by plain enumeration."""
    vocab = len(q)
    out: dict[tuple[int, ...], float] = {}
    tuples = (itertools.product(range(vocab), repeat=k) if replacement
              else itertools.permutations(range(vocab), k))
    for xs in tuples:
        prob, used = 1.0, 0.0
        for x in xs:
            denom = 1.0 if replacement else 1.0 - used
            prob *= q[x] / denom if denom > 0 else 0.0
            used += q[x]
        if prob > 0:
            out[xs] = prob
    return out


def verifier_law(p: np.ndarray, q: np.ndarray, k: int, replacement: bool
                 ) -> tuple[np.ndarray, float]:
    """Output law and acceptance of RRS (``replacement``) / RRSw, over every ordered tuple."""
    out = np.zeros(len(p))
    accepted = 0.0
    for xs, prob in tuple_law(q, k, replacement).items():
        r, reach, drafted = p.copy(), prob, []
        for x in xs:
            prop = q.copy()
            if not replacement:
                prop[drafted] = 0.0
                prop /= prop.sum()
            a = min(1.0, r[x] / prop[x])
            out[x] += reach * a
            accepted += reach * a
            reach *= 1.0 - a
            drafted.append(x)
            excess = np.maximum(r - prop, 0.0)
            if excess.sum() == 0.0:  # r == prop: every step accepts; nothing left to emit
                reach = 0.0
                break
            r = excess / excess.sum()
        out += reach * r
    return out, accepted


def one_minus_tv(p: np.ndarray, q: np.ndarray) -> float:
    return float(np.minimum(p, q).sum())


# ----------------------------------------------------------------------------- LP vs closed forms


@pytest.mark.parametrize("replacement", [True, False])
@given(data=st.data())
def test_lp_equals_subset_closed_form(replacement, data):
    p, q, k = data.draw(instances(replacement=replacement))
    lp = optimal_acceptance(p, q, k, replacement=replacement)
    closed = optimal_acceptance_subsets(p, q, k, replacement=replacement)
    assert abs(lp - closed) <= LP_TOL


@pytest.mark.parametrize("replacement", [True, False])
@given(data=st.data())
def test_k1_is_one_minus_tv(replacement, data):
    p, q, _ = data.draw(instances(replacement=replacement))
    expected = one_minus_tv(p, q)
    assert abs(optimal_acceptance(p, q, 1, replacement=replacement) - expected) <= LP_TOL
    for fn in (optimal_acceptance_subsets, optimal_acceptance_sorted):
        assert abs(fn(p, q, 1, replacement=replacement) - expected) <= EXACT_TOL
    rr = rrs_acceptance(p, q, 1) if replacement else rrsw_acceptance(p, q, 1)
    assert abs(rr - expected) <= EXACT_TOL


@given(instances(max_vocab=9, max_k=6, replacement=True))
def test_sorted_prefix_exact_iid(inst):
    """Proven (exchange argument, see the docstring): the optimal H is a p/q-prefix."""
    p, q, k = inst
    assert abs(optimal_acceptance_sorted(p, q, k, replacement=True)
               - optimal_acceptance_subsets(p, q, k, replacement=True)) <= EXACT_TOL


@given(instances(max_vocab=7, max_k=4, replacement=False))
def test_sorted_prefix_without_replacement_empirical(inst):
    """Not proven (research note §5 marks it [R]); never contradicted here.

    The prefix minimum is an upper bound by construction; equality held on every instance tried
    (hypothesis, 2e4 random instances, adversarial hill-climbing, and full grids on V = 3, 4).
    """
    p, q, k = inst
    prefix = optimal_acceptance_sorted(p, q, k, replacement=False)
    full = optimal_acceptance_subsets(p, q, k, replacement=False)
    assert prefix >= full - EXACT_TOL
    assert prefix - full <= EXACT_TOL


# ----------------------------------------------------------------------------- inequalities


@given(data=st.data())
def test_rrs_le_iid_optimum_le_wo_optimum(data):
    p, q, k = data.draw(instances(max_vocab=6, max_k=4, replacement=True))
    iid = optimal_acceptance_subsets(p, q, k, replacement=True)
    assert rrs_acceptance(p, q, k) <= iid + EXACT_TOL
    if k <= np.count_nonzero(q):
        assert iid <= optimal_acceptance_subsets(p, q, k, replacement=False) + EXACT_TOL


@given(instances(max_vocab=6, max_k=4, replacement=False))
def test_rrsw_le_wo_optimum(inst):
    p, q, k = inst
    assert rrsw_acceptance(p, q, k) <= optimal_acceptance_subsets(p, q, k, replacement=False) \
        + EXACT_TOL


@given(instances(max_vocab=6, max_k=1, replacement=True), st.integers(1, 5))
def test_optimum_non_decreasing_in_k(inst, k_max):
    p, q, _ = inst
    iid = [optimal_acceptance_subsets(p, q, k, replacement=True) for k in range(1, k_max + 1)]
    assert all(a <= b + EXACT_TOL for a, b in itertools.pairwise(iid))
    k_wo = min(k_max, int(np.count_nonzero(q)))
    wo = [optimal_acceptance_subsets(p, q, k, replacement=False) for k in range(1, k_wo + 1)]
    assert all(a <= b + EXACT_TOL for a, b in itertools.pairwise(wo))
    assert iid[0] >= one_minus_tv(p, q) - EXACT_TOL


@given(instances(max_vocab=6, max_k=4, replacement=True))
def test_spectr_upper_bound(inst):
    """SpecTr's bound ``α*_iid <= Σ_x min(p, 1 − (1 − q)^k)`` (research note §4)."""
    p, q, k = inst
    bound = float(np.minimum(p, 1.0 - (1.0 - q) ** k).sum())
    assert optimal_acceptance_subsets(p, q, k, replacement=True) <= bound + EXACT_TOL


@given(data=st.data())
def test_p_equals_q_gives_one(data):
    vocab = data.draw(st.integers(1, 5))
    p = data.draw(prob_vectors(vocab, zeros=data.draw(st.booleans())))
    k = data.draw(st.integers(1, int(np.count_nonzero(p))))
    for rep in (True, False):
        assert optimal_acceptance(p, p, k, replacement=rep) == pytest.approx(1.0, abs=LP_TOL)
        assert optimal_acceptance_subsets(p, p, k, replacement=rep) == pytest.approx(1.0)
        assert optimal_acceptance_sorted(p, p, k, replacement=rep) == pytest.approx(1.0)
    assert rrs_acceptance(p, p, k) == 1.0
    assert rrsw_acceptance(p, p, k) == pytest.approx(1.0, abs=EXACT_TOL)  # renormalising rounds


@pytest.mark.parametrize("replacement", [True, False])
def test_disjoint_supports_give_zero(replacement):
    p = np.array([0.6, 0.4, 0.0, 0.0])
    q = np.array([0.0, 0.0, 0.3, 0.7])
    for fn in (optimal_acceptance, optimal_acceptance_subsets, optimal_acceptance_sorted):
        assert fn(p, q, 2, replacement=replacement) == pytest.approx(0.0, abs=LP_TOL)
    rr = rrs_acceptance(p, q, 2) if replacement else rrsw_acceptance(p, q, 2)
    assert rr == pytest.approx(0.0, abs=EXACT_TOL)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_point_mass_draft_iid(k):
    """``q = δ_a``: every draft is ``a``, so ``α* = p(a)`` with replacement for any k (§9)."""
    p = np.array([0.2, 0.5, 0.3])
    q = np.array([0.0, 1.0, 0.0])
    assert optimal_acceptance(p, q, k, replacement=True) == pytest.approx(0.5, abs=LP_TOL)
    assert optimal_acceptance_subsets(p, q, k, replacement=True) == pytest.approx(0.5)
    assert rrs_acceptance(p, q, k) == pytest.approx(0.5)


# ----------------------------------------------------------------------------- worked values


# research note §9 "Values a test can assert" (and §4 for the SpecTr-bound example):
# (p, q, k, replacement, α*, RRS or RRSw)
WORKED = [
    ((0.9, 0.1), (0.5, 0.5), 2, True, 0.85, 0.80),
    ((0.9, 0.1), (0.5, 0.5), 2, False, 1.0, 1.0),
    ((0.5, 0.3, 0.2), (0.2, 0.3, 0.5), 2, True, 0.86, 0.76),
    ((0.5, 0.3, 0.2), (0.2, 0.3, 0.5), 2, False, 69 / 70, 0.82),  # note: .985714
    ((0.5, 0.3, 0.2), (0.2, 0.3, 0.5), 3, True, 0.988, 0.808),
    ((0.5, 0.5, 0.0), (0.1, 0.1, 0.8), 2, True, 0.36, 0.36),
    ((0.5, 0.5, 0.0), (0.1, 0.1, 0.8), 2, False, 1.0, None),
]


@pytest.mark.parametrize("p, q, k, replacement, alpha, rr", WORKED)
def test_worked_values_from_research_note(p, q, k, replacement, alpha, rr):
    p, q = np.array(p), np.array(q)
    assert optimal_acceptance(p, q, k, replacement=replacement) == pytest.approx(alpha, abs=LP_TOL)
    for fn in (optimal_acceptance_subsets, optimal_acceptance_sorted):
        assert fn(p, q, k, replacement=replacement) == pytest.approx(alpha, abs=EXACT_TOL)
    if rr is not None:
        got = rrs_acceptance(p, q, k) if replacement else rrsw_acceptance(p, q, k)
        assert got == pytest.approx(rr, abs=EXACT_TOL)


def test_spectr_bound_not_tight_example():
    """§4: p=(.5,.5,0), q=(.1,.1,.8), k=2: the SpecTr bound is .38 but α* = .36."""
    p, q = np.array([0.5, 0.5, 0.0]), np.array([0.1, 0.1, 0.8])
    assert float(np.minimum(p, 1 - (1 - q) ** 2).sum()) == pytest.approx(0.38)
    assert optimal_acceptance(p, q, 2, replacement=True) == pytest.approx(0.36, abs=LP_TOL)


def test_misstated_formula_differs():
    """§0: ``p(H) + (1 − q(H))^k`` is not the optimum for k ≥ 2 (here 0.45, at H = {2}, ≠ 0.86)."""
    p, q, k = np.array([0.5, 0.3, 0.2]), np.array([0.2, 0.3, 0.5]), 2
    wrong = min(sum(p[list(h)]) + (1 - sum(q[list(h)])) ** k
                for r in range(4) for h in itertools.combinations(range(3), r))
    assert wrong == pytest.approx(0.45)
    assert optimal_acceptance_subsets(p, q, k, replacement=True) == pytest.approx(0.86)


# ----------------------------------------------------------------------------- RRS / RRSw exact


@given(instances(max_vocab=5, max_k=3, replacement=True))
def test_rrs_lossless_and_acceptance_by_enumeration(inst):
    p, q, k = inst
    out, acc = verifier_law(p, q, k, replacement=True)
    np.testing.assert_allclose(out, p, atol=1e-12)
    assert rrs_acceptance(p, q, k) == pytest.approx(acc, abs=1e-12)


@given(instances(max_vocab=5, max_k=3, replacement=False))
def test_rrsw_lossless_and_acceptance_by_enumeration(inst):
    p, q, k = inst
    out, acc = verifier_law(p, q, k, replacement=False)
    np.testing.assert_allclose(out, p, atol=1e-12)
    assert rrsw_acceptance(p, q, k) == pytest.approx(acc, abs=1e-12)


def test_rrsw_all_zero_residual_mid_chain():
    """RRSw: after rejecting token 0 the residual (0, .5, .5) equals the renormalised proposal,
    so the residual update at step 2 is all-zero (0/0 guard) and step 2 accepts surely."""
    p, q = np.array([0.0, 0.5, 0.5]), np.array([0.5, 0.25, 0.25])
    assert rrsw_acceptance(p, q, 2) == 1.0
    out, acc = verifier_law(p, q, 2, replacement=False)
    np.testing.assert_allclose(out, p, atol=1e-15)
    assert acc == pytest.approx(1.0)
    assert optimal_acceptance_subsets(p, q, 2, replacement=False) == pytest.approx(1.0)
    # i.i.d.: the residual can only equal q when p == q (r_1 vanishes where p < q <= q > 0).
    assert rrs_acceptance(p, q, 2) == pytest.approx(1 - 0.5 * 0.5)
    assert rrs_acceptance(q, q, 3) == 1.0


# ----------------------------------------------------------------------------- draft-set law


@pytest.mark.parametrize("replacement", [True, False])
@given(data=st.data())
def test_draft_set_law_matches_tuple_enumeration(replacement, data):
    _, q, k = data.draw(instances(max_vocab=5, max_k=3, replacement=replacement))
    law = draft_set_law(q, k, replacement=replacement)
    assert sum(law.values()) == pytest.approx(1.0, abs=1e-12)
    expected: dict[frozenset[int], float] = {}
    for xs, prob in tuple_law(q, k, replacement).items():
        expected[frozenset(xs)] = expected.get(frozenset(xs), 0.0) + prob
    assert {s for s, m in law.items() if m > 0} == {s for s, m in expected.items() if m > 0}
    for s, m in law.items():
        assert m == pytest.approx(expected.get(s, 0.0), abs=1e-12)
        assert all(q[x] > 0 for x in s)
        assert len(s) == k if not replacement else 1 <= len(s) <= k


@pytest.mark.parametrize("replacement", [True, False])
def test_draft_set_law_monte_carlo(replacement):
    """Sampled sets (i.i.d. draws / Gumbel-top-k) agree with the exact law within 5 sigma."""
    rng = np.random.default_rng(20240611)
    q = np.array([0.05, 0.4, 0.25, 0.2, 0.1])
    k, n = 3, 200_000
    if replacement:
        draws = rng.choice(len(q), size=(n, k), p=q)
    else:  # Gumbel-top-k = sequential sampling without replacement (research note §3)
        draws = np.argsort(-(np.log(q) + rng.gumbel(size=(n, len(q)))), axis=1)[:, :k]
    masks = np.bitwise_or.reduce(np.left_shift(1, draws), axis=1)  # drafted set as a bitmask
    counts = np.bincount(masks, minlength=1 << len(q))
    law = draft_set_law(q, k, replacement=replacement)
    for s, m in law.items():
        freq = counts[sum(1 << x for x in s)] / n
        assert abs(freq - m) <= 5 * np.sqrt(m * (1 - m) / n) + 1e-12
    assert sum(counts[sum(1 << x for x in s)] for s in law) == n


# ----------------------------------------------------------------------------- solver handling


def test_lp_tiny_masses_regression():
    """HiGHS presolve called this feasible LP infeasible (set masses ~1e-18); presolve is off."""
    p = np.array([0.0, 1.0, 0.0, 0.0, 0.0, 0.0])
    q = np.array([5.6414519386671454e-18, 8.6267284548642265e-01, 1.3732708366902349e-01,
                  2.4732738248870442e-08, 4.6101263999765228e-08, 1.0551603058977943e-11])
    for rep in (True, False):
        assert optimal_acceptance(p, q, 3, replacement=rep) == pytest.approx(
            optimal_acceptance_subsets(p, q, 3, replacement=rep), abs=LP_TOL)


def test_lp_raises_on_non_optimal_status(monkeypatch):
    import cvxpy as cp

    def fake_solve(self, *args, **kwargs):
        self._status = cp.INFEASIBLE
        return None

    monkeypatch.setattr(cp.Problem, "solve", fake_solve)
    with pytest.raises(RuntimeError, match="infeasible"):
        optimal_acceptance([0.5, 0.5], [0.3, 0.7], 2, replacement=True)


def test_lp_warns_on_inaccurate_status(monkeypatch):
    import cvxpy as cp

    real_solve = cp.Problem.solve

    def inaccurate_solve(self, *args, **kwargs):
        real_solve(self, *args, **kwargs)
        self._status = cp.OPTIMAL_INACCURATE

    monkeypatch.setattr(cp.Problem, "solve", inaccurate_solve)
    with pytest.warns(RuntimeWarning, match="optimal_inaccurate"):
        value = optimal_acceptance([0.9, 0.1], [0.5, 0.5], 2, replacement=True)
    assert value == pytest.approx(0.85, abs=LP_TOL)


# ----------------------------------------------------------------------------- bad input


PQ_FUNCS = [
    lambda p, q, k: optimal_acceptance(p, q, k, replacement=True),
    lambda p, q, k: optimal_acceptance(p, q, k, replacement=False),
    lambda p, q, k: optimal_acceptance_subsets(p, q, k, replacement=True),
    lambda p, q, k: optimal_acceptance_subsets(p, q, k, replacement=False),
    lambda p, q, k: optimal_acceptance_sorted(p, q, k, replacement=True),
    lambda p, q, k: optimal_acceptance_sorted(p, q, k, replacement=False),
    rrs_acceptance,
    rrsw_acceptance,
]
GOOD = np.array([0.5, 0.3, 0.2])
BAD_INPUTS = [
    (np.array([[0.5, 0.5]]), GOOD, 1, "p"),
    (GOOD, np.array([[0.5, 0.5]]), 1, "q"),
    (GOOD, np.array([0.5, 0.5]), 1, "same length"),
    (np.array([1.2, -0.1, -0.1]), GOOD, 1, "p"),
    (GOOD, np.array([0.5, np.nan, 0.5]), 1, "q"),
    (np.array([0.5, 0.3, 0.1]), GOOD, 1, "p"),
    (GOOD, np.array([0.5, 0.3, 0.3]), 1, "q"),
    (np.array([]), np.array([]), 1, "p"),
    (GOOD, GOOD, 0, "k"),
    (GOOD, GOOD, 1.5, "k"),
    (GOOD, GOOD, True, "k"),
    (GOOD, GOOD, "2", "k"),
]


@pytest.mark.parametrize("fn", PQ_FUNCS)
@pytest.mark.parametrize("p, q, k, name", BAD_INPUTS)
def test_bad_input_raises_value_error(fn, p, q, k, name):
    with pytest.raises(ValueError, match=name):
        fn(p, q, k)


@pytest.mark.parametrize("fn", [PQ_FUNCS[1], PQ_FUNCS[3], PQ_FUNCS[5], rrsw_acceptance])
def test_k_above_support_without_replacement(fn):
    with pytest.raises(ValueError, match="k=3"):
        fn(GOOD, np.array([0.5, 0.5, 0.0]), 3)


def test_k_above_support_fine_with_replacement():
    q = np.array([0.5, 0.5, 0.0])
    assert optimal_acceptance_subsets(GOOD, q, 3, replacement=True) == pytest.approx(
        optimal_acceptance(GOOD, q, 3, replacement=True), abs=LP_TOL)


def test_draft_set_law_bad_input():
    with pytest.raises(ValueError, match="q"):
        draft_set_law([0.5, 0.6], 1, replacement=True)
    with pytest.raises(ValueError, match="k"):
        draft_set_law([0.5, 0.5], 0, replacement=True)
    with pytest.raises(ValueError, match="k"):
        draft_set_law([1.0, 0.0], 2, replacement=False)


def test_subsets_rejects_large_vocab():
    p = np.full(17, 1 / 17)
    with pytest.raises(ValueError, match="16"):
        optimal_acceptance_subsets(p, p, 1, replacement=True)
    assert optimal_acceptance_sorted(p, p, 2, replacement=True) == pytest.approx(1.0)


def test_integer_like_k_and_lists_accepted():
    assert optimal_acceptance_subsets([0.9, 0.1], [0.5, 0.5], np.int64(2),
                                      replacement=True) == pytest.approx(0.85)
