"""Lazy drafter marginals: the ranked interface builds exactly the trees of the dense array.

References: ``ddtree_heap_reference`` (the reference's heap, independent of both paths),
``ranked_candidates`` over the dense row, and ``np.sort`` for the tie-robust k-th largest.
"""

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from proofs_check.reference import ddtree_heap_reference
from proofs_check.strategies import log_q_arrays
from treespec_sim.marginals import (
    DenseLogMarginals,
    LazyLogMarginals,
    kth_largest,
    ranked_candidates,
)
from treespec_sim.policies import _ddtree as ddtree_module
from treespec_sim.policies import chain, ddtree, path_probabilities
from treespec_sim.synth import get_regime, make_world
from treespec_sim.synth.drafter import ClassLogMarginals


@pytest.fixture
def ranked_always(monkeypatch):
    """Route every LazyLogMarginals through the ranked path, whatever its V."""
    monkeypatch.setattr(ddtree_module, "_RANKED_MIN_VOCAB", 0)


# ---------------------------------------------------------------- kth_largest
@given(st.integers(1, 3000), st.integers(0, 2**32 - 1), st.sampled_from([2, 5, 50, 10**9]))
def test_kth_largest_equals_sorting(n, seed, levels):
    rng = np.random.default_rng(seed)
    # `levels` distinct values: 2 gives massive ties (the junk-floor case), 1e9 none
    values = rng.integers(0, levels, size=n).astype(np.float64) / 7.0
    if seed % 3 == 0:
        values[rng.random(n) < 0.2] = -np.inf
    for k in sorted({1, min(n, 2), min(n, 64), min(n, 512), n}):
        assert kth_largest(values, k) == np.sort(values)[n - k]


def test_kth_largest_rejects_bad_k():
    with pytest.raises(ValueError, match="k must be in"):
        kth_largest(np.zeros(3), 4)
    with pytest.raises(ValueError, match="k must be in"):
        kth_largest(np.zeros(3), 0)


def test_ranked_candidates_on_a_junk_floor_row_keeps_the_smallest_ids():
    row = np.full(40000, -17.0)
    row[[5, 30000, 123]] = [-1.0, -2.0, -3.0]
    toks, vals = ranked_candidates(row, -np.inf, 8)
    assert toks.tolist() == [5, 30000, 123, 0, 1, 2, 3, 4]
    assert vals.tolist() == [-1.0, -2.0, -3.0] + [-17.0] * 5


# ---------------------------------------------------------------- dense reference wrapper
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])  # patch is constant
@given(log_q_arrays(max_depth=4, max_vocab=6), st.integers(1, 40))
def test_ranked_ddtree_matches_the_heap_reference(ranked_always, lp, budget):
    parent, token, depth, _ = ddtree_heap_reference(lp, budget)
    tree = ddtree(DenseLogMarginals(lp), budget, root_token=min(3, lp.shape[1] - 1))
    assert tree.parent.tolist() == parent
    assert tree.token[1:].tolist() == token[1:]
    assert tree.depth.tolist() == depth
    assert chain(DenseLogMarginals(lp)).token.tolist() == chain(lp).token.tolist()


def test_dense_wrapper_validates_and_round_trips():
    lp = np.log(np.array([[0.5, 0.25, 0.25], [0.1, 0.6, 0.3]]))
    lazy = DenseLogMarginals(lp)
    assert isinstance(lazy, LazyLogMarginals) and lazy.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(lazy), lp)
    np.testing.assert_array_equal(lazy.row_max(), lp.max(axis=1))
    assert lazy.argmax().tolist() == [0, 1]
    np.testing.assert_array_equal(lazy.values(1, [2, 0]), lp[1, [2, 0]])
    with pytest.raises(ValueError, match="positive log-probability"):
        DenseLogMarginals(np.array([[0.5, -1.0]]))
    with pytest.raises(ValueError, match="row must be in"):
        lazy.top(2, 1)


# ---------------------------------------------------------------- the word-class drafter
def _world(regime: str, vocab: int, **knobs):
    spec = dataclasses.replace(get_regime(regime), name=f"{regime}-test", **knobs)
    return make_world(spec, seed=4, vocab_size=vocab)


WORLDS = [("math500", 8192, {}),              # sharp rows: many junk-floor ties at depth 1
          ("aime25", 8192, {}),               # depth_sharpening != 0: the sharpened rows
          ("alpaca", 4096, {}),               # the chat family
          ("mt-bench", 8192, {"junk": 0.5})]  # heavy junk: near-floor values everywhere


@pytest.mark.parametrize("regime,vocab,knobs", WORLDS)
def test_class_marginals_equal_the_dense_drafter_bit_for_bit(ranked_always, regime, vocab,
                                                             knobs):
    world = _world(regime, vocab, **knobs)
    rng = np.random.default_rng(11)
    for _ in range(6):
        ctx = world.sample_context(rng)
        lazy = world.draft_lazy(ctx)
        assert isinstance(lazy, ClassLogMarginals)
        dense = world.draft(ctx)
        np.testing.assert_array_equal(np.asarray(lazy), dense)
        toks = rng.integers(0, vocab, size=50)
        for row in (0, world.depth - 1):
            np.testing.assert_array_equal(lazy.values(row, toks), dense[row, toks])
        for k in (1, 5, 64, 512):
            everything = lazy.top_all(k)
            block = lazy.top_block(k)
            assert block[0].dtype == np.int64 and block[0].shape == block[1].shape
            for row in range(world.depth):
                want = ranked_candidates(dense[row], -np.inf, k)
                for got in (lazy.top(row, k), everything[row], (block[0][row], block[1][row])):
                    np.testing.assert_array_equal(got[0], want[0])
                    np.testing.assert_array_equal(got[1], want[1])
            # the interface's own top_block (the stacked rows) on the dense reference
            ref = DenseLogMarginals(dense).top_block(k)
            np.testing.assert_array_equal(ref[0], block[0])
            np.testing.assert_array_equal(ref[1], block[1])
        np.testing.assert_array_equal(lazy.argmax(), np.argmax(dense, axis=1))
        for budget in (1, 16, 64, 300):
            a = ddtree(dense, budget, root_token=ctx.last_token)
            b = ddtree(world.draft_lazy(ctx), budget, root_token=ctx.last_token)
            assert a.parent.tolist() == b.parent.tolist()
            assert a.token.tolist() == b.token.tolist()
            np.testing.assert_array_equal(path_probabilities(b, world.draft_lazy(ctx)),
                                          path_probabilities(a, dense))


def test_junk_floor_ties_are_filled_in_token_order(ranked_always, monkeypatch):
    # A sharp row with few tokens above the floor j / V: the k-th value is the floor, tied by
    # thousands of tokens; the tie-fill path must be the one that runs, and be exact.
    world = _world("math500", 8192)
    calls = []
    original = ClassLogMarginals._fill_ties

    def counting(self, *args):
        calls.append(1)
        return original(self, *args)

    monkeypatch.setattr(ClassLogMarginals, "_fill_ties", counting)
    rng = np.random.default_rng(2)
    for _ in range(8):
        ctx = world.sample_context(rng)
        dense = world.draft(ctx)
        for row, (toks, vals) in enumerate(world.draft_lazy(ctx).top_all(64)):
            want = ranked_candidates(dense[row], -np.inf, 64)
            np.testing.assert_array_equal(toks, want[0])
            np.testing.assert_array_equal(vals, want[1])
    assert calls, "no row hit the junk floor; the test no longer covers the tie fill"


def test_ranking_by_belief_mass_instead_of_output_value_is_caught(ranked_always, monkeypatch):
    # Known-buggy variant: skip the tie handling and trust the class candidates, ranked by
    # value. At the junk floor it keeps the wrong tied tokens; the comparison must see it.
    def buggy_fill(self, row, toks, vals, k):
        return toks, vals

    monkeypatch.setattr(ClassLogMarginals, "_fill_ties", buggy_fill)
    world = _world("math500", 8192)
    rng = np.random.default_rng(2)
    wrong = 0
    for _ in range(8):
        ctx = world.sample_context(rng)
        dense = world.draft(ctx)
        for row, (toks, _) in enumerate(world.draft_lazy(ctx).top_all(64)):
            wrong += not np.array_equal(toks, ranked_candidates(dense[row], -np.inf, 64)[0])
    assert wrong > 0


def test_small_vocabularies_are_read_densely():
    world = _world("alpaca", 1024)
    ctx = world.sample_context(np.random.default_rng(0))
    lazy = world.draft_lazy(ctx)
    tree = ddtree(lazy, 32, root_token=ctx.last_token)
    ref = ddtree(world.draft(ctx), 32, root_token=ctx.last_token)
    assert tree.token.tolist() == ref.token.tolist()


def test_worlds_without_word_classes_wrap_the_dense_array():
    world = make_world("small", seed=0)
    ctx = world.sample_context(np.random.default_rng(0))
    lazy = world.draft_lazy(ctx)
    assert isinstance(lazy, DenseLogMarginals)
    np.testing.assert_array_equal(np.asarray(lazy), world.draft(ctx))


def _tied_log_q(rng: np.random.Generator, depth: int, vocab: int) -> np.ndarray:
    """Rows with ties (quantised levels), a junk-like floor, and some impossible tokens."""
    rows = []
    for _ in range(depth):
        p = rng.dirichlet(np.full(vocab, 0.3))
        kind = rng.integers(3)
        if kind == 0:                                      # a few levels: many exact ties
            p = np.ceil(p * 8.0)
        elif kind == 1:                                    # a floor shared by most tokens
            p = np.maximum(p, np.quantile(p, 0.7))
        p[rng.random(vocab) < 0.1] = 0.0                   # -inf entries
        p[rng.integers(vocab)] += 1.0                      # at least one possible token
        with np.errstate(divide="ignore"):
            rows.append(np.log(p / p.sum()))
    return np.array(rows)


@pytest.mark.parametrize("seed", range(12))
def test_ranked_ddtree_reranks_full_lists_exactly(ranked_always, seed):
    # B > 16 makes the ranked builder take short lists first and read rows further (up to K = B)
    rng = np.random.default_rng(seed)
    lp = _tied_log_q(rng, int(rng.integers(3, 7)), int(rng.integers(70, 200)))
    for budget in (65, 130, 300):
        want = ddtree(lp, budget, root_token=1)
        got = ddtree(DenseLogMarginals(lp), budget, root_token=1)
        assert got.parent.tolist() == want.parent.tolist()
        assert got.token.tolist() == want.token.tolist()


@pytest.mark.parametrize("regime,knobs", [("aime25", {}), ("gsm8k", {}),
                                          ("math500", {"depth_sharpening": 20.0}),
                                          ("math500", {"depth_sharpening": -0.9})])
def test_class_sharpening_equals_the_token_level_formula(regime, knobs):
    # Independent of ClassLogMarginals: sharpen mu token by token, renormalise by its own sum.
    world = _world(regime, 8192, **knobs)
    drafter = world.drafter
    rng = np.random.default_rng(5)
    for _ in range(4):
        ctx = world.sample_context(rng)
        q = np.exp(world.draft(ctx))
        ref = drafter._sharpened(drafter.marginals(ctx.topic, ctx.last_token))
        ref = ref * (1.0 - drafter.junk)[:, None] + (drafter.junk / world.vocab_size)[:, None]
        assert np.isfinite(q).all()
        np.testing.assert_allclose(q, ref, rtol=1e-12, atol=0)


@pytest.mark.parametrize("regime", ["math500", "aime25", "mt-bench", "alpaca"])
def test_ranked_ddtree_equals_the_dense_build_on_calibrated_worlds(regime):
    # Short first lists (_FIRST_LIST per depth), read further only where the tree's last
    # pop does not rule a row's next token out: the tree must be the dense builder's at every
    # budget, on the worlds the sweep runs (V = 32768), including B = 1024.
    world = make_world(regime, seed=1)
    rng = np.random.default_rng(5)
    for _ in range(3):
        ctx = world.sample_context(rng)
        dense = world.draft(ctx)
        for budget in (1, 17, 64, 512, 1024):
            a = ddtree(dense, budget, root_token=ctx.last_token)
            b = ddtree(world.draft_lazy(ctx), budget, root_token=ctx.last_token)
            assert a.parent.tolist() == b.parent.tolist()
            assert a.token.tolist() == b.token.tolist()


def test_ranked_ddtree_reads_a_row_further_when_the_tree_needs_it(ranked_always):
    # A flat first row: the 16 first entries cannot hold a 40-node tree's first level, so
    # the builder must read that row further; a bug that kept the first lists would build
    # a different tree (fewer depth-1 nodes).
    V = 64
    flat = np.full(V, -math.log(V))
    sharp = np.log(np.r_[0.9, np.full(V - 1, 0.1 / (V - 1))])
    lp = np.vstack([flat, sharp, sharp])
    want = ddtree(lp, 40, root_token=0)
    got = ddtree(DenseLogMarginals(lp), 40, root_token=0)
    assert int((want.depth == 1).sum()) > ddtree_module._FIRST_LIST
    assert got.parent.tolist() == want.parent.tolist()
    assert got.token.tolist() == want.token.tolist()
