"""The sampled fill (Tsubame pass 2, sampled chains): its draws have the exact law, the fill
through ``engine.run_round`` is lossless, and the proposal it records reads as the dense rows.

(a) :func:`draw_children` against the closed form of every ordered ``k``-tuple (successive
    sampling without replacement, i.i.d., Greedy) on a small vocabulary, by chi-square with a
    stated false-alarm rate and fixed seeds; known-buggy samplers fail the same check; the
    inverse-CDF map's interval ends are right even when a draw leaves a mass of ``1e-13``.
(b) ``run_round`` on a tiny world, uncapped, ``T`` in {0.6, 1}: every tree it draws is in the
    enumerated support (:func:`proofs_check.sampled.enumerate_trees`), with frequencies that pass
    a chi-square against the exact law, and the very proposal and target rows it hands the
    verifier; the mixture over all trees of the package verifier's exact round law, continued with
    target draws, is the target's law (exact). A fill that draws from one law and records another
    fails the same check.
(c) :class:`ProposalRows` equals the dense array it stands for, and the verifiers give the same
    answers from either.
"""

from __future__ import annotations

from collections import Counter
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

import treespec_sim.policies.sampled as sampled
from proofs_check.enumerate import extend_law, max_law_gap, target_law
from proofs_check.sampled import enumerate_trees, round_law
from treespec_sim import DraftTree
from treespec_sim.engine import run_round
from treespec_sim.policies import tsubame
from treespec_sim.policies.draft import ProposalRows
from treespec_sim.policies.sampled import (
    MarginalProposal,
    PreparedLaw,
    draw_children,
    fill_shape,
    fill_tree,
    tempered,
)
from treespec_sim.rows import ArrayOracle, dense_rows
from treespec_sim.synth import Context, make_world
from treespec_sim.verify import RULES, expected_length, verify
from treespec_sim.verify.rrs import check_proposal

#: False-alarm rate of each chi-square test (seeds are fixed, so outcomes are deterministic).
FALSE_ALARM = 1e-4
EXACT_TOL = 1e-12

#: V = 7 cuts into blocks of 3, 3, 1 (so draws step over block boundaries); token 1 has no mass.
Q7 = np.array([0.31, 0.0, 0.22, 0.17, 0.12, 0.1, 0.08])


def _chi_square_pvalue(seen: Counter, exact: dict, n: int) -> float:
    """Pearson chi-square of ``seen`` against ``n`` times ``exact``; cells with expected count
    below 5 pooled. An outcome outside ``exact``'s support is an impossible draw: p = 0."""
    if set(seen) - {k for k, p in exact.items() if p > 0}:
        return 0.0
    keys = sorted(exact)
    obs = np.array([seen[k] for k in keys], dtype=float)
    exp = np.array([exact[k] for k in keys]) * n
    big = exp >= 5
    obs, exp = np.append(obs[big], obs[~big].sum()), np.append(exp[big], exp[~big].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    return float(stats.chisquare(obs, exp * obs.sum() / exp.sum()).pvalue)


# ------------------------------------------------------------------ (a) one node's draws
def _tuple_law(q: np.ndarray, k: int, scheme: str) -> dict[tuple[int, ...], float]:
    """Exact law of the ordered children of one node (the closed forms of
    :mod:`proofs_check.sampled`: successive sampling, i.i.d., Greedy)."""
    shape = DraftTree.from_parents_multiset([-1] + [0] * k, [-1] + [0] * k)
    law: dict[tuple[int, ...], float] = {}
    for tree, _, prob in enumerate_trees(shape, lambda path: q, scheme):
        key = tuple(int(x) for x in tree.token[1:])
        law[key] = law.get(key, 0.0) + prob
    return law


def _draw_pvalue(q: np.ndarray, k: int, scheme: str, n: int, seed: int) -> float:
    rng = np.random.default_rng(seed)
    law = PreparedLaw.of(q)
    seen = Counter(tuple(draw_children(law, k, scheme, rng).tolist()) for _ in range(n))
    return _chi_square_pvalue(seen, _tuple_law(q, k, scheme), n)


@pytest.mark.parametrize("scheme, k", [("without_replacement", 3), ("without_replacement", 6),
                                       ("iid", 2), ("greedy", 3)])
def test_draws_have_the_closed_form_law(scheme, k):
    """Every ordered k-tuple, 30000 draws, chi-square at false-alarm rate 1e-4."""
    assert abs(sum(_tuple_law(Q7, k, scheme).values()) - 1) < EXACT_TOL
    assert _draw_pvalue(Q7, k, scheme, 30000, seed=k) > FALSE_ALARM


class _ForgetsDrawn(sampled._Remaining):
    """Known-buggy: never takes a drawn token out (draws with replacement)."""

    def remove(self, x: int) -> None:
        pass


class _WholeMassTarget(sampled._Remaining):
    """Known-buggy renormalisation: the uniform is scaled by the whole mass, not the mass left
    (the excess lands on the last tokens)."""

    def draw(self, u: float) -> int:
        return super().draw(u * float(self.law.block_cdf[-1]) / float(self.cdf[-1]))


class _SubtractsMass(sampled._Remaining):
    """A precision bug, not a law bug: the mass left by subtracting the drawn token's mass."""

    def remove(self, x: int) -> None:
        b, off = divmod(x, self.law.block)
        if self.mass is self.law.block_mass:
            self.mass = self.mass.copy()
        self.drawn.setdefault(b, []).append(off)
        self.mass[b] -= self.law.q[x]
        self.cdf = np.cumsum(self.mass)


@pytest.mark.parametrize("buggy", [_ForgetsDrawn, _WholeMassTarget])
def test_the_same_check_rejects_buggy_samplers(monkeypatch, buggy):
    monkeypatch.setattr(sampled, "_Remaining", buggy)
    assert _draw_pvalue(Q7, 3, "without_replacement", 30000, seed=3) < FALSE_ALARM


def _interval_ends_ok(remaining, q: np.ndarray, drawn: list[int], rel: float) -> bool:
    """The inverse-CDF map sends ``u`` to token ``x`` on ``[F(x-1), F(x)) / R`` (``F`` the
    cumulative mass left, in index order; exact rational arithmetic on the float weights):
    probe each interval ``rel`` of its width inside both ends."""
    mass = [Fraction(0) if x in drawn else Fraction(float(v)) for x, v in enumerate(q)]
    total = sum(mass)
    lo = Fraction(0)
    for x, m in enumerate(mass):
        if m == 0:
            continue
        a, b = lo / total, (lo + m) / total
        for u in (a + rel * (b - a), b - rel * (b - a)):
            if remaining.draw(float(u)) != x:
                return False
        lo += m
    return True


def test_inverse_cdf_ends_after_drawing_almost_all_the_mass():
    """After drawing a token of mass ``1 - 1e-13`` the rest is re-summed, not subtracted: the
    next draw's intervals are right to 1e-6 of their width. Subtracting from the whole mass
    (absolute error ~1e-16, i.e. ~1e-3 of what is left) misplaces them."""
    q = np.array([2e-14, 1.0 - 1e-13, 3e-14, 1e-14, 1.5e-14, 2.5e-14])
    law = PreparedLaw.of(q / q.sum())
    for cls, ok in ((sampled._Remaining, True), (_SubtractsMass, False)):
        left = cls(law)
        left.remove(1)
        assert _interval_ends_ok(left, law.q, [1], 1e-6) is ok, cls.__name__
    left = sampled._Remaining(PreparedLaw.of(Q7))
    assert _interval_ends_ok(left, Q7, [], 1e-9)
    left.remove(3)
    assert _interval_ends_ok(left, Q7, [3], 1e-9)


def test_zero_mass_and_drawn_tokens_are_never_drawn():
    law = PreparedLaw.of(Q7)
    rng = np.random.default_rng(5)
    for _ in range(200):
        kids = draw_children(law, 6, "without_replacement", rng)
        assert sorted(kids.tolist()) == [0, 2, 3, 4, 5, 6]
    left = sampled._Remaining(law)
    for u in (0.0, np.nextafter(1.0, 0.0)):  # both ends of [0, 1)
        assert left.draw(u) in (0, 6)
    with pytest.raises(ValueError, match="exceeds the proposal's support"):
        draw_children(law, 7, "without_replacement", rng)
    assert draw_children(law, 9, "iid", rng).size == 9


# ------------------------------------------------------------------ (b) through run_round
#: (method, rule, budget): every fill path of the registry's sampled trees on a world with a
#: conditional proposal (Tsubame) and with the marginal (sampled-chain).
ENGINE_CASES = [("tsubame", "rrsw", 3), ("tsubame", "rrs", 3), ("tsubame", "univer", 3),
                ("tsubame-rrsw", "rrsw", 4), ("sampled-chain", "rrs", None)]


def _proposal_fn(world, ctx, method: str, temperature: float):
    """The law each node's children are drawn from, computed from the world (not the fill):
    Tsubame reads the backend's conditional proposal, sampled-chain the marginal."""
    log_q = world.draft(ctx)

    def fn(path: tuple[int, ...]) -> np.ndarray:
        if method == "sampled-chain":
            q = np.exp(log_q[len(path)])
        else:
            q = world.draft_conditional(ctx, len(path) + 1, path[-1] if path else ctx.last_token)
        z = q ** (1.0 / temperature)
        return z / z.sum()

    return fn


def _engine_check(method: str, rule: str, budget, temperature: float, n: int
                  ) -> tuple[float, float, float]:
    """``(p-value of run_round's trees, worst gap of its proposal/target rows from the
    enumerated ones, lossless gap of the exact law)`` on ``tiny`` (V = 3)."""
    world, ctx = make_world("tiny", seed=1), Context(0, 0)
    rng = np.random.default_rng([7, int(100 * temperature), len(method), budget or 0])
    rounds = [run_round(world, ctx, method=method, budget=budget, rule=rule,
                        temperature=temperature, rng=rng, sample=False) for _ in range(n)]
    parent = rounds[0].tree.parent
    scheme = rounds[0].draft.scheme
    if budget is not None:
        assert rounds[0].tree.size == budget  # uncapped: the whole plan is filled
    shape = DraftTree.from_parents_multiset(parent, [int(ctx.last_token)] + [0] * (parent.size - 1))
    prop_fn = _proposal_fn(world, ctx, method, temperature)
    exact = {tuple(t.token[1:].tolist()): (p, prop) for t, prop, p in
             enumerate_trees(shape, prop_fn, scheme)}
    inner = np.unique(parent[1:])
    seen: Counter = Counter()
    gap = 0.0
    for rnd in rounds:
        assert np.array_equal(rnd.tree.parent, parent)
        key = tuple(rnd.tree.token[1:].tolist())
        seen[key] += 1
        if seen[key] == 1 and key in exact:  # the rows the verifier is handed
            told = np.asarray(rnd.proposal)[inner]
            gap = max(gap, float(np.abs(told - exact[key][1][inner]).max()))
            rows = np.array([world.target_row(ctx, path, temperature)
                             for path in [(), *rnd.tree.paths()]])
            gap = max(gap, float(np.abs(dense_rows(rnd.rows) - rows).max()))
    p_value = _chi_square_pvalue(seen, {k: v[0] for k, v in exact.items()}, n)

    def row_fn(path):
        return world.target_row(ctx, path, temperature)

    law = round_law(shape, row_fn, prop_fn, scheme=scheme,
                    law_fn=lambda t, rows, prop: RULES[rule].round_law(t, ArrayOracle(rows, t),
                                                                       prop))
    n_tokens = int(rounds[0].tree.max_depth) + 1
    want = target_law(world, ctx, temperature=temperature, n_tokens=n_tokens)
    lossless = max_law_gap(extend_law(law, row_fn, n_tokens), want)
    return p_value, gap, lossless


@pytest.mark.parametrize("temperature", [0.6, 1.0])
@pytest.mark.parametrize("method, rule, budget", ENGINE_CASES)
def test_engine_fill_is_lossless_by_enumeration(method, rule, budget, temperature):
    """2000 rounds through run_round (chi-square, false-alarm rate 1e-4) and the exact law."""
    p_value, gap, lossless = _engine_check(method, rule, budget, temperature, 2000)
    assert gap < 1e-12
    assert lossless < EXACT_TOL
    assert p_value > FALSE_ALARM


def test_engine_check_rejects_a_fill_that_draws_from_another_law(monkeypatch):
    """Known-buggy: the fill draws from the law squared (a sharper temperature) but records
    the right law; the same check through run_round must reject it."""
    real = sampled.draw_children

    def sharper(law, k, scheme, rng):
        q2 = np.square(law.q)
        return real(PreparedLaw.of(q2 / q2.sum()), k, scheme, rng)

    monkeypatch.setattr(sampled, "draw_children", sharper)
    p_value, gap, lossless = _engine_check("tsubame", "rrsw", 3, 1.0, 2000)
    assert gap < 1e-12 and lossless < EXACT_TOL  # what the verifier is told is right...
    assert p_value < FALSE_ALARM                 # ...but the trees are not drawn from it


# ------------------------------------------------------------------ (c) the proposal rows
def _world_draft(temperature: float, scheme: str = "without_replacement"):
    world = make_world("small", seed=0)
    ctx = Context(1, 3)
    return tsubame(world.draft(ctx), 12, rng=np.random.default_rng(0), scheme=scheme,
                   temperature=temperature), world, ctx


@pytest.mark.parametrize("temperature", [0.6, 1.0])
def test_proposal_rows_equal_their_dense_array(temperature):
    draft, world, ctx = _world_draft(temperature)
    rows = draft.proposal
    assert isinstance(rows, ProposalRows)
    dense = np.asarray(rows)
    tree = draft.tree
    assert dense.shape == rows.shape == (tree.n_nodes, world.vocab_size) and len(rows) == \
        tree.n_nodes
    assert len(rows.laws) == len(np.unique(tree.depth[np.unique(tree.parent[1:])]))  # per depth
    lq = world.draft(ctx)
    for v in range(tree.n_nodes):
        np.testing.assert_array_equal(rows[v], dense[v])
        assert rows[v, 2] == dense[v, 2]
        if tree.children(v).size:  # the depth's tempered marginal, whatever the parent
            np.testing.assert_allclose(rows[v], tempered(np.exp(lq[tree.depth[v]]), temperature),
                                       rtol=1e-12, atol=1e-15)
        else:
            assert not rows[v].any()
    np.testing.assert_array_equal(rows[-1], dense[-1])
    np.testing.assert_array_equal(rows[1:3], dense[1:3])
    np.testing.assert_array_equal(rows ** 2, dense ** 2)
    with pytest.raises(ValueError, match="read-only"):
        rows[0][0] = 1.0


@pytest.mark.parametrize("rule", ["rrsw", "traversal", "univer"])
def test_verifiers_read_proposal_rows_as_the_dense_array(rule):
    draft, world, ctx = _world_draft(1.0)
    target = world.target_rows(ctx, draft.tree, 1.0)
    dense = np.asarray(draft.proposal)
    assert isinstance(check_proposal(draft.proposal, draft.tree, without_replacement=True),
                      ProposalRows)
    assert expected_length(draft.tree, target, rule=rule, proposal=draft.proposal) == \
        expected_length(draft.tree, target, rule=rule, proposal=dense)
    for seed in range(5):
        a = verify(draft.tree, target, rule=rule, rng=np.random.default_rng(seed),
                   proposal=draft.proposal)
        b = verify(draft.tree, target, rule=rule, rng=np.random.default_rng(seed),
                   proposal=dense)
        assert a.tokens == b.tokens


def test_fill_shape_rows_are_the_depth_rows():
    rows = np.random.default_rng(2).dirichlet(np.ones(6), size=3)
    shape = sampled.k_ary_shape(2, 3)
    _, prop = fill_shape(shape, rows, scheme="without_replacement",
                         rng=np.random.default_rng(0))
    np.testing.assert_array_equal(np.asarray(prop), rows[np.minimum(shape.depth, 2)])
    assert len(prop.laws) == 3
    rows[:] = 0.0  # the proposal owns its rows
    assert np.asarray(prop).sum() > 0


def test_check_proposal_rows_errors_match_the_dense_ones():
    tree = DraftTree.from_parents([-1, 0, 0, 1], [0, 0, 1, 2])
    good = np.array([0.5, 0.3, 0.2])
    cases = [
        ((np.array([0.5, -0.1, 0.6]),), r"proposal\[0, 1\] = -0.1 is negative"),
        ((np.array([0.5, np.nan, 0.5]),), r"proposal\[0, 1\] = nan is not finite"),
        ((np.array([0.5, 0.3, 0.0]),), r"proposal\[0\] sums to 0.8"),
        ((good, np.array([0.5, 0.5, 0.0])),
         r"node 3 drafted token 2 with zero proposal mass \(proposal\[1, 2\] = 0\)"),
    ]
    def with_stats(laws, row_of):
        """ProposalRows over read-only copies of ``laws`` with the builder's (min, sum)."""
        frozen = tuple(np.array(q) for q in laws)
        for q in frozen:
            q.flags.writeable = False
        return ProposalRows(frozen, row_of, 3, law_stats=tuple((q.min(), q.sum())
                                                               for q in frozen))

    for laws, message in cases:
        row_of = np.array([0, len(laws) - 1, -1, -1])
        rows = ProposalRows(laws, row_of, 3)
        for prop in (rows, np.asarray(rows), with_stats(laws, row_of)):
            with pytest.raises(ValueError, match=message):
                check_proposal(prop, tree, without_replacement=True)
    wide = DraftTree.from_parents([-1, 0, 0, 1], [0, 0, 1, 3])   # token 3 with V = 3
    for prop in (ProposalRows((good,), np.array([0, 0, -1, -1]), 3),
                 np.asarray(ProposalRows((good,), np.array([0, 0, -1, -1]), 3))):
        with pytest.raises(ValueError, match=r"tree.token\[3\] = 3 is outside the proposal's "
                                             r"vocabulary \(V = 3\)"):
            check_proposal(prop, wide, without_replacement=True)
    rows = ProposalRows((good,), np.array([0, -1, -1, -1]), 3)
    with pytest.raises(ValueError, match=r"proposal\[1\] sums to 0.0"):
        check_proposal(rows, tree, without_replacement=True)
    off = ProposalRows((good * 1.0001,), np.array([0, 0, -1, -1]), 3)
    fixed = check_proposal(off, tree, without_replacement=True)
    np.testing.assert_allclose(fixed[1], good, rtol=1e-15)
    # the same renormalisation from the builder's statistics (and none for a clean law)
    for laws in ((good * 1.0001,), (good * (1.0 + 5e-12),)):
        a = check_proposal(with_stats(laws, np.array([0, 0, -1, -1])), tree,
                           without_replacement=True)
        b = check_proposal(ProposalRows(laws, np.array([0, 0, -1, -1]), 3), tree,
                           without_replacement=True)
        np.testing.assert_array_equal(a[1], b[1])
        assert a[1].sum() != laws[0].sum()
    clean = with_stats((good,), np.array([0, 0, -1, -1]))
    assert check_proposal(clean, tree, without_replacement=True) is clean


def test_each_distinct_law_is_prepared_once():
    """A conditional proposal is called once per (depth, parent token); a marginal one per
    depth, and it equals the dense log-probabilities' law, lazy or not."""
    world = make_world("small", seed=0)
    ctx = Context(1, 3)
    calls: Counter = Counter()

    def conditional(depth, parent):
        calls[(depth, parent)] += 1
        return world.draft_conditional(ctx, depth, parent)

    shape = sampled.k_ary_shape(3, 3, root_token=ctx.last_token)
    draft = fill_tree(shape, conditional, scheme="iid", rng=np.random.default_rng(1),
                      temperature=0.6)
    assert max(calls.values()) == 1
    assert len(draft.proposal.laws) == len(calls) < 1 + 3 + 9
    lazy, dense = MarginalProposal(world.draft_lazy(ctx)), MarginalProposal(world.draft(ctx))
    for d in (1, 2, 3):
        np.testing.assert_array_equal(lazy.law(d, 0.6), dense.law(d, 0.6))
        np.testing.assert_allclose(dense.law(d, 0.6), tempered(np.exp(world.draft(ctx)[d - 1]),
                                                               0.6), rtol=1e-12)
        assert lazy.law(d, 1.0) is lazy(d, 5)  # cached, parent ignored
