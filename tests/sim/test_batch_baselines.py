"""The batch's baselines beside ``batch_caddtree`` (policies/_batch.py)."""

import itertools

import numpy as np
import pytest

from proofs_check.budget import THETA_RTOL, batch_instances
from treespec_sim import DraftTree
from treespec_sim.policies import (
    batch_caddtree,
    batch_theta,
    best_fixed_budget,
    caddtree,
    chain,
    ddtree,
    fixed_budget_trees,
    independent_caddtree,
    surrogate_tau_curves,
    tetris_chains,
)
from treespec_sim.surrogate import surrogate_length


def _lookup(verify):
    return lambda n: verify[np.asarray(n) - 1]


def _dflash_like(rng, n, L=8, V=64):
    out = []
    for _ in range(n):
        scale = rng.uniform(0.5, 6.0) * np.linspace(1, 0.3, L)[:, None]
        logits = rng.standard_normal((L, V)) * scale
        out.append(logits - np.logaddexp.reduce(logits, axis=1, keepdims=True))
    return out


def test_no_baseline_beats_the_shared_budget_under_convex_costs():
    """batch_caddtree maximises the batch's surrogate rate over every budget vector and every
    tree of each size (docs/theory/batch_caddtree.md), so every baseline is at most it."""
    for lps, draft, verify, m in batch_instances(np.random.default_rng(11), 60):
        kw = {"draft_cost": draft, "verify_cost": _lookup(verify)}
        best = batch_theta(batch_caddtree(lps, max_budget=m, **kw), lps, **kw)
        cap = len(lps) * m
        for trees in (fixed_budget_trees(lps, m), fixed_budget_trees(lps, 1),
                      independent_caddtree(lps, max_budget=m, **kw),
                      tetris_chains(lps, max_length=m, **kw),
                      tetris_chains(lps, max_length=m, capacity=cap // 2, **kw)):
            assert all(t.size <= m for t in trees)
            assert batch_theta(trees, lps, **kw) <= best * (1 + THETA_RTOL)


def test_fixed_budget_is_ddtree_at_that_budget():
    lps = _dflash_like(np.random.default_rng(0), 3)
    for t, lp in zip(fixed_budget_trees(lps, 12, root_tokens=[1, 2, 3]), lps, strict=True):
        assert t == ddtree(lp, 12, root_token=int(t.root_token))


def test_independent_caddtree_of_one_request_is_caddtree():
    (lp,) = _dflash_like(np.random.default_rng(1), 1)
    vc = lambda n: 1.0 + 0.02 * np.asarray(n)  # noqa: E731
    assert independent_caddtree([lp], draft_cost=0.3, verify_cost=vc, max_budget=64)[0] == \
        caddtree(lp, draft_cost=0.3, verify_cost=vc, max_budget=64)


def test_independent_caddtree_prices_each_request_at_its_share():
    """With b identical requests and the cost C_v(b n) / b, each request's stop is the one of
    caddtree on that per-request cost."""
    (lp,) = _dflash_like(np.random.default_rng(2), 1)
    vc = lambda n: 1.0 + 0.001 * np.asarray(n) ** 1.5  # noqa: E731
    trees = independent_caddtree([lp] * 4, draft_cost=0.8, verify_cost=vc, max_budget=64)
    ref = caddtree(lp, draft_cost=0.2, verify_cost=lambda n: vc(4 * np.asarray(n)) / 4,
                   max_budget=64)
    assert all(t == ref for t in trees)


def test_tetris_takes_the_best_chain_tokens_under_its_capacity():
    """By brute force over every split of the capacity into chain prefixes."""
    rng = np.random.default_rng(3)
    for _ in range(20):
        lps = _dflash_like(rng, 3, L=4, V=5)
        cap = int(rng.integers(0, 13))
        trees = tetris_chains(lps, draft_cost=1.0, verify_cost=lambda n: 1.0 + 0 * n,
                              capacity=cap)
        assert sum(t.size for t in trees) == cap
        for t, lp in zip(trees, lps, strict=True):
            assert t.size == 0 or t == chain(lp, t.size)
            assert list(t.parent) == list(range(-1, t.size))
        got = sum(surrogate_length(t, lp) for t, lp in zip(trees, lps, strict=True))
        best = max(sum(surrogate_length(chain(lp, k), lp) if k else 1.0
                       for k, lp in zip(split, lps, strict=True))
                   for split in itertools.product(range(5), repeat=3) if sum(split) == cap)
        assert got == pytest.approx(best, rel=1e-12)


def test_tetris_without_a_capacity_stops_by_the_batch_rule():
    lps = _dflash_like(np.random.default_rng(4), 4)
    vc = lambda n: 1.0 + 0.05 * np.asarray(n)  # noqa: E731
    trees = tetris_chains(lps, draft_cost=0.5, verify_cost=vc)
    rate = batch_theta(trees, lps, draft_cost=0.5, verify_cost=vc)
    # one node more or less (for any request) does not raise the rate: a local maximum
    for i, t in enumerate(trees):
        for k in (t.size - 1, t.size + 1):
            if 0 <= k <= lps[i].shape[0]:
                other = list(trees)
                other[i] = chain(lps[i], k) if k else DraftTree.root_only()
                again = batch_theta(other, lps, draft_cost=0.5, verify_cost=vc)
                assert again <= rate * (1 + 1e-12)


def test_best_fixed_budget_is_the_argmax_of_the_stream_rate():
    rng = np.random.default_rng(5)
    batches = [_dflash_like(rng, 4) for _ in range(6)]
    vc = lambda n: 2.0 + 0.03 * np.asarray(n)  # noqa: E731
    curves, nodes = zip(*(surrogate_tau_curves(lps, 32) for lps in batches), strict=True)
    budgets = (1, 2, 4, 8, 16, 32)
    choice = best_fixed_budget(curves, draft_cost=0.7, verify_cost=vc, budgets=budgets,
                               node_counts=nodes)
    # recomputed from the trees themselves: all tokens over all seconds
    rates = []
    for B in budgets:
        tokens = seconds = 0.0
        for lps in batches:
            trees = fixed_budget_trees(lps, B)
            tokens += sum(surrogate_length(t, lp) for t, lp in zip(trees, lps, strict=True))
            seconds += 0.7 + vc(sum(t.size + 1 for t in trees))
        rates.append(tokens / seconds)
    np.testing.assert_allclose(choice.rates, rates, rtol=1e-12)
    assert choice.budget == budgets[int(np.argmax(rates))]
    assert choice.tokens_per_s == max(rates)


def test_surrogate_curves_stop_at_the_last_prefix():
    lp = np.log(np.array([[0.5, 0.5]]))
    tau, nodes = surrogate_tau_curves([lp], 4)
    np.testing.assert_allclose(tau[0], [1.0, 1.5, 2.0, 2.0, 2.0])
    assert nodes[0].tolist() == [0, 1, 2, 2, 2]


@pytest.mark.parametrize("call, match", [
    (lambda: best_fixed_budget([], draft_cost=1.0, verify_cost=abs, budgets=[1]),
     "at least one batch"),
    (lambda: best_fixed_budget([np.ones((2, 3)), np.ones((3, 3))], draft_cost=1.0,
                               verify_cost=abs, budgets=[1]), "same shape"),
    (lambda: best_fixed_budget([np.ones((2, 3))], draft_cost=1.0, verify_cost=abs,
                               budgets=[3]), "budgets <= K = 2"),
    (lambda: tetris_chains([np.log([[0.5, 0.5]])], draft_cost=1.0, verify_cost=abs,
                           capacity=-1), "capacity must be a non-negative integer"),
    (lambda: batch_theta([], [np.log([[0.5, 0.5]])], draft_cost=1.0, verify_cost=abs),
     "one entry per request"),
])
def test_bad_input_is_named(call, match):
    with pytest.raises(ValueError, match=match):
        call()
