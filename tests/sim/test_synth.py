"""Tests for ``treespec_sim.synth``: exact kernels, the synthetic target, and the drafter.

Reference values are computed with *independent dense implementations* written here (explicit
``V x V`` logit matrices, softmax, matrix products), never with the module's own decomposition.

Statistical tests use fixed seeds (so they are deterministic) and a significance level of
``ALPHA = 1e-3``: were the implementation exact, a random seed would fail with probability 1e-3.
"""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from scipy import stats
from scipy.special import logsumexp

from treespec_sim.rows import TargetOracle
from treespec_sim.synth import (
    REGIMES,
    Context,
    RegimeSpec,
    SparseBoostKernel,
    World,
    chain_tau,
    get_regime,
    make_world,
)
from treespec_sim.synth.diagnostics import greedy_continuation
from treespec_sim.tree import DraftTree

ALPHA = 1e-3
TEMPERATURES = (0.0, 0.05, 0.5, 1.0, 2.5)


# ---------------------------------------------------------------------- dense references
def dense_logits(base: np.ndarray, succ: np.ndarray, boost: np.ndarray) -> np.ndarray:
    """``L[a, b] = base[b] + boost[a, j]`` if ``b == succ[a, j]``, built entry by entry."""
    v = base.shape[0]
    out = np.tile(np.asarray(base, dtype=np.float64), (v, 1))
    for a in range(v):
        for j in range(succ.shape[1]):
            out[a, succ[a, j]] += boost[a, j]
    return out


def dense_law(logits: np.ndarray, temperature: float) -> np.ndarray:
    """Row-wise softmax of ``logits / T`` in the log domain; one-hot first argmax at T = 0."""
    if temperature == 0:
        out = np.zeros_like(logits)
        out[np.arange(logits.shape[0]), np.argmax(logits, axis=1)] = 1.0
        return out
    z = logits / temperature
    return np.exp(z - logsumexp(z, axis=1, keepdims=True))


def kernel_dense(k: SparseBoostKernel) -> np.ndarray:
    return dense_law(dense_logits(k.base, k.succ, k.boost), k.temperature)


def random_kernel_arrays(seed: int, v: int, s: int, base_scale: float, boost_scale: float
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    base = rng.normal(0.0, base_scale, v)
    succ = np.stack([rng.permutation(v)[:s] for _ in range(v)]) if s else np.zeros((v, 0), int)
    boost = rng.exponential(boost_scale, (v, s)) * (rng.random((v, s)) < 0.8)  # some exact 0s
    return base, succ.astype(np.int64), boost


def random_tree(rng: np.random.Generator, n: int, v: int, root: int) -> DraftTree:
    parent = [-1] + [int(rng.integers(0, i)) for i in range(1, n + 1)]
    token = [root] + [int(t) for t in rng.integers(0, v, n)]
    return DraftTree.from_parents_multiset(parent, token)


@pytest.fixture(scope="module")
def tiny() -> World:
    return make_world("tiny", seed=0)


@pytest.fixture(scope="module")
def small() -> World:
    return make_world("small", seed=0)


@pytest.fixture(scope="module")
def low() -> World:
    return make_world("low-entropy", seed=0)


# ---------------------------------------------------------------------- kernel
@given(seed=st.integers(0, 2**32 - 1), v=st.integers(2, 9), s_frac=st.floats(0, 1),
       temperature=st.sampled_from(TEMPERATURES), boost_scale=st.sampled_from([0.5, 5.0, 60.0]))
def test_kernel_matches_dense_bruteforce(seed, v, s_frac, temperature, boost_scale):
    s = round(s_frac * v)
    base, succ, boost = random_kernel_arrays(seed, v, s, 3.0, boost_scale)
    k = SparseBoostKernel(base, succ, boost, temperature)
    ref = kernel_dense(k)
    np.testing.assert_allclose(k.dense(), ref, rtol=1e-9, atol=1e-300)
    np.testing.assert_allclose(k.rows(np.arange(v)).sum(axis=1), 1.0, rtol=0, atol=1e-12)
    a, b = np.meshgrid(np.arange(v), np.arange(v), indexing="ij")
    np.testing.assert_allclose(k.edge_prob(a, b), ref, rtol=1e-9, atol=1e-300)
    np.testing.assert_array_equal(k.argmax(np.arange(v)),
                                  np.argmax(dense_logits(base, succ, boost), axis=1))
    mu = np.random.default_rng(seed).dirichlet(np.ones(v), size=3)
    np.testing.assert_allclose(k.push(mu), mu @ ref, rtol=1e-9, atol=1e-15)
    np.testing.assert_allclose(k.push(mu[0]), mu[0] @ ref, rtol=1e-9, atol=1e-15)
    if temperature > 0:
        z = dense_logits(base, succ, boost) / temperature
        np.testing.assert_allclose(k.logZ, logsumexp(z, axis=1), rtol=1e-12)
        np.testing.assert_allclose(k.base_law, dense_law(base[None], temperature)[0], rtol=1e-9)


def test_kernel_scalar_and_vector_calls_agree():
    base, succ, boost = random_kernel_arrays(3, 7, 3, 1.0, 2.0)
    k = SparseBoostKernel(base, succ, boost, 0.7)
    assert isinstance(k.edge_prob(2, 4), float)
    assert k.edge_prob(2, 4) == pytest.approx(k.row(2)[4], rel=1e-12)
    assert isinstance(k.argmax(2), int)
    assert k.edge_prob(np.array([2, 3]), 4).shape == (2,)


def test_kernel_argmax_ties_go_to_smallest_index():
    base = np.array([0.0, 1.0, 1.0, 0.0, 1.0])
    succ = np.array([[3, 0], [4, 2], [0, 3], [1, 2], [2, 4]])
    boost = np.array([[1.0, 1.0], [0.0, 0.0], [0.5, 0.0], [0.0, 0.0], [0.0, 0.0]])
    k = SparseBoostKernel(base, succ, boost, 0.0)
    # row 0: tokens 0, 1, 2, 3 tie at logit 1 -> 0; row 1: 1, 2, 4 tie -> 1; row 2: 0 at 0.5 <
    # the base max 1 at tokens 1, 2, 4 -> 1; rows 3, 4: pure base ties -> 1.
    np.testing.assert_array_equal(k.argmax(np.arange(5)), [0, 1, 1, 1, 1])
    np.testing.assert_array_equal(k.dense(), np.eye(5)[[0, 1, 1, 1, 1]])


def test_kernel_numerically_safe_at_low_temperature_with_huge_boosts():
    base, succ, boost = random_kernel_arrays(11, 9, 4, 30.0, 400.0)
    k = SparseBoostKernel(base, succ, boost, 0.05)           # logits / T up to ~1e4
    rows = k.dense()
    assert np.all(np.isfinite(rows)) and np.all(np.isfinite(k.logZ))
    np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-12)
    np.testing.assert_allclose(rows, kernel_dense(k), rtol=1e-9, atol=1e-300)
    with pytest.raises(ValueError, match="temperature"):
        SparseBoostKernel(base * 1e300, succ, boost, 1e-10)


def test_temperature_is_power_of_the_t1_law():
    base, succ, boost = random_kernel_arrays(5, 8, 3, 2.0, 3.0)
    p1 = kernel_dense(SparseBoostKernel(base, succ, boost, 1.0))
    for t in (0.3, 0.5, 2.0, 4.0):
        pt = p1 ** (1.0 / t)
        pt /= pt.sum(axis=1, keepdims=True)
        np.testing.assert_allclose(SparseBoostKernel(base, succ, boost, t).dense(), pt,
                                   rtol=1e-9)
    np.testing.assert_array_equal(SparseBoostKernel(base, succ, boost, 0.0).dense(),
                                  np.eye(8)[np.argmax(p1, axis=1)])


def test_kernel_sampling_matches_rows_chi_square():
    base, succ, boost = random_kernel_arrays(8, 6, 3, 1.0, 1.5)
    k = SparseBoostKernel(base, succ, boost, 0.8)
    rng = np.random.default_rng(2024)
    n = 30_000
    a = np.repeat(np.arange(6), n // 6)
    draws = k.sample(a, rng)
    for row in range(6):
        counts = np.bincount(draws[a == row], minlength=6)
        expected = k.row(row) * counts.sum()
        keep = expected > 5
        obs = np.append(counts[keep], counts[~keep].sum())
        exp = np.append(expected[keep], expected[~keep].sum())
        obs, exp = (obs, exp) if exp[-1] > 0 else (obs[:-1], exp[:-1])
        assert stats.chisquare(obs, exp).pvalue > ALPHA
    # scalar fast path draws the same values as the vectorised path
    r1, r2 = np.random.default_rng(1), np.random.default_rng(1)
    assert [k.sample(x % 6, r1) for x in range(300)] == [
        int(k.sample(np.array([x % 6]), r2)[0]) for x in range(300)]


@pytest.mark.parametrize("bad", [-0.1, float("nan"), float("inf"), "1", True, None])
def test_kernel_rejects_bad_temperature(bad):
    base, succ, boost = random_kernel_arrays(0, 4, 2, 1.0, 1.0)
    with pytest.raises(ValueError, match="temperature"):
        SparseBoostKernel(base, succ, boost, bad)


def test_kernel_rejects_bad_arrays():
    base, succ, boost = random_kernel_arrays(0, 4, 2, 1.0, 1.0)
    bad_succ = succ.copy()
    bad_succ[1] = [2, 2]
    with pytest.raises(ValueError, match="succ"):
        SparseBoostKernel(base, bad_succ, boost)
    with pytest.raises(ValueError, match="boost"):
        SparseBoostKernel(base, succ, -boost - 1)
    k = SparseBoostKernel(base, succ, boost)
    with pytest.raises(ValueError, match="a contains token"):
        k.row(4)
    with pytest.raises(ValueError, match="b contains token"):
        k.edge_prob(0, -1)


# ---------------------------------------------------------------------- regimes
def test_named_regimes_exist_and_big_ones_have_the_advertised_shape():
    assert {"tiny", "small", "low-entropy", "mid-entropy", "high-entropy"} <= set(REGIMES)
    assert (REGIMES["tiny"].vocab_size, REGIMES["tiny"].depth) == (3, 3)
    assert (REGIMES["small"].vocab_size, REGIMES["small"].depth) == (8, 4)
    for name in ("low-entropy", "mid-entropy", "high-entropy"):
        spec = get_regime(name)
        assert (spec.vocab_size, spec.depth) == (32768, 15)
        assert spec.name == name and spec.description


def test_get_regime_unknown_lists_names():
    with pytest.raises(ValueError, match="low-entropy"):
        get_regime("nope")
    with pytest.raises(ValueError, match="unknown regime"):
        make_world("nope")


@pytest.mark.parametrize(("field", "value"), [
    ("vocab_size", 1), ("vocab_size", 2.5), ("depth", 0), ("n_topics", 0), ("successors", 0),
    ("successors", 8), ("sharpness", float("nan")), ("sharpness_spread", -1.0),
    ("successor_decay", -0.1), ("zipf_exponent", -1.0), ("topic_strength", -1.0),
    ("topic_density", 0.0), ("topic_density", 1.5), ("context_burn_in", -1),
    ("mismatch", 1.5), ("boost_noise", -1.0), ("topic_awareness", -0.1), ("calibration", 0.0),
    ("degradation", 2.0), ("junk", -0.5), ("correction_quality", 1.01), ("name", ""),
    ("depth", True),
])
def test_regime_spec_validation_names_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        dataclasses.replace(get_regime("small"), **{field: value})


# ---------------------------------------------------------------------- world construction
def test_same_seed_same_world_and_different_seed_different_world():
    a, b, c = (make_world("small", seed=s) for s in (3, 3, 4))
    for name in ("background", "topic_vectors", "succ", "boost"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name))
    np.testing.assert_array_equal(a.drafter.succ, b.drafter.succ)
    ctx = Context(topic=1, last_token=2)
    np.testing.assert_array_equal(a.draft(ctx), b.draft(ctx))
    assert not np.array_equal(a.background, c.background) or not np.array_equal(a.succ, c.succ)
    spec = get_regime("low-entropy")
    d = make_world(spec, seed=0, vocab_size=64)
    e = make_world(dataclasses.replace(spec, mismatch=0.5, boost_noise=1.0), seed=0,
                   vocab_size=64)
    # drafter knobs do not move the target (independent random streams)
    np.testing.assert_array_equal(d.succ, e.succ)
    np.testing.assert_array_equal(d.boost, e.boost)
    assert not np.array_equal(d.drafter.succ, e.drafter.succ)


def test_make_world_overrides_and_bad_arguments():
    w = make_world("low-entropy", seed=1, vocab_size=50, depth=5)
    assert (w.vocab_size, w.depth, w.spec.successors) == (50, 5, 8)
    w = make_world("low-entropy", seed=1, vocab_size=4)
    assert w.spec.successors == 3
    ctx = w.sample_context(np.random.default_rng(0))
    assert w.draft(ctx).shape == (15, 4)
    with pytest.raises(ValueError, match="seed"):
        make_world("tiny", seed=-1)
    with pytest.raises(ValueError, match="spec"):
        make_world(3)
    with pytest.raises(ValueError, match="depth"):
        make_world("tiny", depth=0)
    with pytest.raises(ValueError, match="vocab_size"):
        make_world("tiny", vocab_size=1)


def test_world_structure_follows_the_spec(small):
    spec = small.spec
    v, s = spec.vocab_size, spec.successors
    assert small.succ.shape == small.boost.shape == (v, s)
    assert all(len(set(row)) == s for row in small.succ.tolist())
    assert np.all(small.boost >= 0) and np.all(np.diff(small.boost, axis=1) <= 0)
    ranks = np.sort(-small.background)                     # -bg sorted = zipf * log(rank)
    np.testing.assert_allclose(ranks, spec.zipf_exponent * np.log(np.arange(1, v + 1)))
    k = small.target_kernel(2, 1.0)
    np.testing.assert_allclose(k.base, small.background
                               + spec.topic_strength * small.topic_vectors[2])


def test_drafter_without_imperfections_is_the_target():
    spec = dataclasses.replace(get_regime("small"), mismatch=0.0, boost_noise=0.0,
                               topic_awareness=1.0, calibration=1.0)
    w = make_world(spec, seed=5)
    for z in range(spec.n_topics):
        np.testing.assert_allclose(w.draft_kernel(z).dense(), w.target_kernel(z, 1.0).dense(),
                                   rtol=1e-12)


def test_full_mismatch_renames_every_slot():
    spec = dataclasses.replace(get_regime("low-entropy"), mismatch=1.0)
    w = make_world(spec, seed=2, vocab_size=200)
    d, t = w.drafter.succ, w.succ
    assert not (d[:, :, None] == t[:, None, :]).any()
    assert all(len(set(row)) == d.shape[1] for row in d.tolist())


# ---------------------------------------------------------------------- contexts
def test_context_validation_and_advance(small):
    with pytest.raises(ValueError, match="topic"):
        Context(topic=-1, last_token=0)
    with pytest.raises(ValueError, match="last_token"):
        Context(topic=0, last_token=1.5)
    ctx = Context(topic=0, last_token=1, position=7)
    nxt = small.advance(ctx, [3, 4, 5])
    assert nxt == Context(topic=0, last_token=5, position=10)
    assert small.advance(ctx, []) == ctx
    with pytest.raises(ValueError, match="tokens"):
        small.advance(ctx, [8])
    with pytest.raises(ValueError, match="ctx"):
        small.target_row(Context(topic=3, last_token=0))
    with pytest.raises(ValueError, match="ctx"):
        small.target_row(Context(topic=0, last_token=8))
    with pytest.raises(ValueError, match="ctx"):
        small.draft((0, 1))


def test_sample_context_is_reproducible_and_in_range(small):
    a = [small.sample_context(np.random.default_rng(9)) for _ in range(2)]
    assert a[0] == a[1]
    rng = np.random.default_rng(0)
    ctxs = [small.sample_context(rng) for _ in range(200)]
    assert {c.topic for c in ctxs} == set(range(small.n_topics))
    assert all(0 <= c.last_token < 8 for c in ctxs)
    assert all(c.position == small.spec.context_burn_in + 1 for c in ctxs)
    with pytest.raises(ValueError, match="rng"):
        small.sample_context(0)


# ---------------------------------------------------------------------- target
@pytest.mark.parametrize("temperature", TEMPERATURES)
def test_target_rows_are_distributions_and_match_dense(small, temperature):
    for z in range(small.n_topics):
        k = small.target_kernel(z, temperature)
        ref = dense_law(dense_logits(small.background + small.spec.topic_strength
                                     * small.topic_vectors[z], small.succ, small.boost),
                        temperature)
        for x in range(small.vocab_size):
            row = small.target_row(Context(z, x), (), temperature)
            np.testing.assert_allclose(row, ref[x], rtol=1e-9, atol=1e-300)
            np.testing.assert_allclose(row.sum(), 1.0, atol=1e-12)
        # Markov: the law after a path depends on its last token only
        np.testing.assert_array_equal(small.target_row(Context(z, 0), [5, 2], temperature),
                                      k.row(2))


# ---------------------------------------------------------------------- logit scale, tempering
@pytest.mark.parametrize("alpha", [1.0, 2.5, 7.0])
def test_world_tempering_is_exact_for_every_temperature(alpha):
    """``p_T = softmax(alpha l / T)`` from the raw logits, ``p_T ∝ p_1^(1/T)`` normalised
    exactly, and the T = 0 law is the argmax, for a small world with ``logit_scale = alpha``."""
    w = make_world(dataclasses.replace(get_regime("small"), logit_scale=alpha), seed=3)
    for z in range(w.n_topics):
        logits = dense_logits(w.background + w.spec.topic_strength * w.topic_vectors[z],
                              w.succ, w.boost)
        p1 = w.target_kernel(z, 1.0).dense()
        np.testing.assert_allclose(p1, dense_law(alpha * logits, 1.0), rtol=1e-9)
        for t in (0.1, 0.3, 0.6, 1.0, 1.7):
            pt = w.target_kernel(z, t).dense()
            ref = p1 ** (1.0 / t)
            ref /= ref.sum(axis=1, keepdims=True)
            np.testing.assert_allclose(pt, ref, rtol=1e-8, atol=1e-300)
            np.testing.assert_allclose(pt.sum(axis=1), 1.0, atol=1e-12)
        greedy = w.target_kernel(z, 0.0).dense()
        np.testing.assert_array_equal(greedy, np.eye(w.vocab_size)[np.argmax(logits, axis=1)])
        # T -> 0: the mass of the argmax rises to 1 (rows without a tie at the top)
        top2 = np.sort(logits, axis=1)[:, -2:]
        clear = top2[:, 1] - top2[:, 0] > 1e-9
        masses = [(w.target_kernel(z, t).dense() * greedy).sum(axis=1)[clear]
                  for t in (1.0, 0.3, 0.1, 0.03, 0.01, 0.003)]
        assert np.all(np.diff(np.stack(masses), axis=0) >= -1e-12)
        gap = (top2[:, 1] - top2[:, 0])[clear].min()
        t_small = alpha * gap / 50.0            # every runner-up below exp(-50) relative
        np.testing.assert_allclose(w.target_kernel(z, t_small).dense()[clear], greedy[clear],
                                   atol=w.vocab_size * np.exp(-50.0))


def test_logit_scale_moves_no_argmax_and_not_the_drafter():
    base = get_regime("small")
    a = make_world(base, seed=4)
    b = make_world(dataclasses.replace(base, logit_scale=6.0), seed=4)
    for z in range(a.n_topics):
        np.testing.assert_array_equal(a.target_kernel(z, 0.0).argmax(np.arange(8)),
                                      b.target_kernel(z, 0.0).argmax(np.arange(8)))
        # sharper at T = 1: the argmax holds more mass
        top = a.target_kernel(z, 0.0).argmax(np.arange(8))
        assert np.all(b.target_kernel(z, 1.0).dense()[np.arange(8), top]
                      >= a.target_kernel(z, 1.0).dense()[np.arange(8), top] - 1e-12)
    ctx = Context(0, 3)
    np.testing.assert_array_equal(a.draft(ctx), b.draft(ctx))
    # contexts: the first token is drawn from the unscaled background, so the topics and
    # first draws agree; only the burn-in steps follow the (sharper) target
    with pytest.raises(ValueError, match="logit_scale"):
        dataclasses.replace(base, logit_scale=0.0)


def test_logit_scale_one_keeps_the_old_context_stream(small):
    """At ``logit_scale = 1`` the prompt CDF is the T = 1 kernel's own (bit-identical stream)."""
    cdf = small.target_kernel(0, 1.0)._cdf()
    assert small._prompt_cdf(0) is cdf


def test_target_rows_oracle_and_edge_probs_agree(small):
    rng = np.random.default_rng(1)
    for temperature in (0.0, 0.7, 1.0):
        for _ in range(5):
            ctx = small.sample_context(rng)
            tree = random_tree(rng, 25, small.vocab_size, ctx.last_token if rng.random() < .5
                               else -1)
            rows = small.target_rows(ctx, tree, temperature)
            assert rows.shape == (tree.n_nodes, small.vocab_size)
            np.testing.assert_allclose(rows.sum(axis=1), 1.0, atol=1e-12)
            paths = [(), *tree.paths()]
            for v in range(tree.n_nodes):
                np.testing.assert_allclose(rows[v], small.target_row(ctx, paths[v],
                                                                     temperature))
            oracle = small.target_oracle(ctx, tree, temperature)
            assert isinstance(oracle, TargetOracle)
            assert oracle.shape == rows.shape
            gathered = np.ones(tree.n_nodes)
            gathered[1:] = rows[tree.parent[1:], tree.token[1:]]
            np.testing.assert_allclose(oracle.edge_probs(tree), gathered, rtol=1e-12)
            for v in rng.integers(0, tree.n_nodes, 5):
                np.testing.assert_allclose(oracle.row(int(v)), rows[v], rtol=1e-12)


def test_tree_validation(small):
    ctx = Context(0, 3)
    bad_root = DraftTree.from_parents([-1, 0], [4, 1])
    for call in (small.target_rows, small.target_oracle):
        with pytest.raises(ValueError, match="tree"):
            call(ctx, bad_root, 1.0)
        with pytest.raises(ValueError, match="tree"):
            call(ctx, DraftTree.from_parents([-1, 0], [3, 8]), 1.0)
        with pytest.raises(ValueError, match="tree"):
            call(ctx, "not a tree", 1.0)
    with pytest.raises(ValueError, match="path"):
        small.target_row(ctx, [1, 99])


@pytest.mark.parametrize("bad", [-1.0, float("nan"), float("inf"), "hot"])
def test_world_rejects_bad_temperature(small, bad):
    ctx = Context(0, 1)
    tree = DraftTree.from_parents([-1, 0], [1, 2])
    with pytest.raises(ValueError, match="temperature"):
        small.target_row(ctx, (), bad)
    with pytest.raises(ValueError, match="temperature"):
        small.target_rows(ctx, tree, bad)
    with pytest.raises(ValueError, match="temperature"):
        small.target_oracle(ctx, tree, bad)
    with pytest.raises(ValueError, match="temperature"):
        small.sequence_prob(ctx, [1], bad)
    with pytest.raises(ValueError, match="temperature"):
        small.target_sample(ctx, 2, np.random.default_rng(0), bad)


@pytest.mark.parametrize("temperature", [0.0, 0.5, 1.0, 2.0])
def test_sequence_prob_sums_to_one_over_all_continuations(tiny, temperature):
    for z, x0 in itertools.product(range(tiny.n_topics), range(tiny.vocab_size)):
        ctx = Context(z, x0)
        seqs = list(itertools.product(range(3), repeat=3))
        probs = np.array([tiny.sequence_prob(ctx, s, temperature) for s in seqs])
        assert probs.sum() == pytest.approx(1.0, abs=1e-12)
        seq = seqs[int(np.argmax(probs))]
        manual = np.prod([tiny.target_row(ctx, seq[:i], temperature)[seq[i]] for i in range(3)])
        assert probs.max() == pytest.approx(manual, rel=1e-12)
    assert tiny.sequence_prob(Context(0, 0), []) == 1.0


def test_target_sample_frequencies_chi_square(tiny):
    ctx = Context(topic=1, last_token=2)
    rng = np.random.default_rng(12345)
    n = 12_000
    seqs = list(itertools.product(range(3), repeat=3))
    index = {s: i for i, s in enumerate(seqs)}
    counts = np.zeros(len(seqs))
    for _ in range(n):
        counts[index[tuple(tiny.target_sample(ctx, 3, rng, 1.0).tolist())]] += 1
    expected = n * np.array([tiny.sequence_prob(ctx, s, 1.0) for s in seqs])
    keep = expected >= 5
    obs = np.append(counts[keep], counts[~keep].sum())
    exp = np.append(expected[keep], expected[~keep].sum())
    if exp[-1] == 0:
        obs, exp = obs[:-1], exp[:-1]
    assert stats.chisquare(obs, exp).pvalue > ALPHA


def test_target_sample_greedy_and_arguments(small, low):
    for world in (small, low):
        ctx = world.sample_context(np.random.default_rng(3))
        out = world.target_sample(ctx, 6, np.random.default_rng(0), 0.0)
        assert out.dtype == np.int64 and out.shape == (6,)
        x, expect = ctx.last_token, []
        for _ in range(6):
            x = int(np.argmax(world.target_row(ctx, [x], 1.0)))
            expect.append(x)
        np.testing.assert_array_equal(out, expect)
        np.testing.assert_array_equal(out, greedy_continuation(world, ctx, 6))
        assert world.sequence_prob(ctx, out, 0.0) == 1.0
    ctx = Context(0, 1)
    assert small.target_sample(ctx, 0, np.random.default_rng(0)).shape == (0,)
    with pytest.raises(ValueError, match="n_tokens"):
        small.target_sample(ctx, -1, np.random.default_rng(0))
    with pytest.raises(ValueError, match="rng"):
        small.target_sample(ctx, 2, 42)


def test_large_vocabulary_rows_are_safe_at_low_temperature(low):
    rng = np.random.default_rng(4)
    for temperature in (0.05, 1.0):
        for _ in range(3):
            ctx = low.sample_context(rng)
            row = low.target_row(ctx, (), temperature)
            assert row.shape == (32768,) and np.all(np.isfinite(row)) and row.min() >= 0
            assert row.sum() == pytest.approx(1.0, abs=1e-10)
            k = low.target_kernel(ctx.topic, temperature)
            # the whole row against the log-domain formula on explicit logits
            logits = k.base.copy()
            logits[k.succ[ctx.last_token]] += k.boost[ctx.last_token]
            ref = np.exp(logits / temperature - logsumexp(logits / temperature))
            np.testing.assert_allclose(row, ref, rtol=1e-9, atol=1e-300)


def test_large_oracle_edge_probs(low):
    rng = np.random.default_rng(6)
    ctx = low.sample_context(rng)
    tree = random_tree(rng, 512, 32768, ctx.last_token)
    oracle = low.target_oracle(ctx, tree, 1.0)
    probs = oracle.edge_probs(tree)
    assert probs.shape == (513,) and probs[0] == 1.0
    for v in rng.integers(1, 513, 10):
        assert probs[v] == pytest.approx(oracle.row(int(tree.parent[v]))[tree.token[v]],
                                         rel=1e-12)


# ---------------------------------------------------------------------- drafter
def dense_draft(world: World, ctx: Context, spec: RegimeSpec) -> np.ndarray:
    """``log q_d`` from dense matrices: mu_d = e_x0 Q_1 ... Q_d, q_d = (1-j_d) mu_d + j_d/V."""
    k = world.draft_kernel(ctx.topic)
    v, big_l = world.vocab_size, spec.depth
    base = world.background + (spec.topic_awareness * spec.topic_strength
                               * world.topic_vectors[ctx.topic])
    np.testing.assert_allclose(k.base, base)
    q_draft = dense_law(dense_logits(k.base, k.succ, k.boost), spec.calibration)
    u = dense_law(base[None], spec.calibration)[0]
    mu = np.eye(v)[ctx.last_token]
    out = np.empty((big_l, v))
    for d in range(1, big_l + 1):
        eta = spec.degradation * (d - 1) / max(big_l - 1, 1)
        junk = spec.junk * d / big_l
        q_d = (1 - eta) * q_draft + eta * np.outer(np.ones(v), u)
        mu = mu @ q_d
        with np.errstate(divide="ignore"):
            out[d - 1] = np.log((1 - junk) * mu + junk / v)
    return out


@pytest.mark.parametrize("name", ["tiny", "small"])
def test_draft_equals_dense_marginals(name):
    for seed in (0, 1):
        w = make_world(name, seed=seed)
        for z, x0 in itertools.product(range(w.n_topics), range(w.vocab_size)):
            ctx = Context(z, x0)
            lq = w.draft(ctx)
            assert lq.shape == (w.depth, w.vocab_size) and lq.dtype == np.float64
            assert np.all(np.isfinite(lq)) and np.all(lq <= 0)
            np.testing.assert_allclose(logsumexp(lq, axis=1), 0.0, atol=1e-12)
            np.testing.assert_allclose(lq, dense_draft(w, ctx, w.spec), rtol=1e-9, atol=1e-12)


def test_draft_with_other_knobs_and_zero_junk():
    spec = dataclasses.replace(get_regime("small"), junk=0.0, calibration=0.4,
                               degradation=0.9, topic_awareness=0.0)
    w = make_world(spec, seed=2)
    for x0 in range(8):
        ctx = Context(1, x0)
        lq = w.draft(ctx)
        np.testing.assert_allclose(np.exp(lq).sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(np.exp(lq), np.exp(dense_draft(w, ctx, spec)), atol=1e-13)
    assert np.isneginf(make_world(dataclasses.replace(spec, calibration=0.002), seed=2)
                       .draft(Context(0, 0))).any()


def test_draft_ignores_target_temperature_and_is_fresh(small):
    ctx = Context(1, 3)
    a = small.draft(ctx)
    b = a.copy()
    small.target_rows(ctx, DraftTree.from_parents([-1, 0], [3, 1]), 0.1)
    a[:] = 0.0                                          # the caller owns the returned array
    np.testing.assert_array_equal(small.draft(ctx), b)


def test_draft_conditional(small):
    spec = small.spec
    k = small.draft_kernel(2)
    u = k.base_law
    for x0 in range(small.vocab_size):
        ctx = Context(2, x0)
        q = np.exp(small.draft(ctx))
        np.testing.assert_allclose(small.draft_conditional(ctx, 1, x0), q[0], rtol=1e-12)
        for d in range(2, spec.depth + 1):
            for parent in range(small.vocab_size):
                got = small.draft_conditional(ctx, d, parent)
                eta = spec.degradation * (d - 1) / (spec.depth - 1)
                junk = spec.junk * d / spec.depth
                row = (1 - eta) * kernel_dense(k)[parent] + eta * u
                kappa = spec.correction_quality
                ref = (1 - kappa) * q[d - 1] + kappa * ((1 - junk) * row + junk / 8)
                np.testing.assert_allclose(got, ref, rtol=1e-10)
                assert got.sum() == pytest.approx(1.0, abs=1e-12)
    with pytest.raises(ValueError, match="parent_token"):
        small.draft_conditional(Context(2, 0), 1, 1)
    with pytest.raises(ValueError, match="parent_token"):
        small.draft_conditional(Context(2, 0), 2, 8)
    with pytest.raises(ValueError, match="depth"):
        small.draft_conditional(Context(2, 0), 0, 0)
    with pytest.raises(ValueError, match="depth"):
        small.draft_conditional(Context(2, 0), spec.depth + 1, 0)


def test_large_draft_is_normalised_and_flattens_with_depth(low):
    rng = np.random.default_rng(0)
    mass = []
    for _ in range(20):
        ctx = low.sample_context(rng)
        lq = low.draft(ctx)
        assert lq.shape == (15, 32768) and np.all(np.isfinite(lq)) and np.all(lq <= 0)
        np.testing.assert_allclose(logsumexp(lq, axis=1), 0.0, atol=1e-10)
        mass.append(np.exp(lq.max(axis=1)))
        tau = chain_tau(low, ctx)
        greedy = greedy_continuation(low, ctx, 15)
        hits = np.argmax(lq, axis=1) == greedy
        assert tau == 1 + (15 if hits.all() else int(np.argmin(hits)))
    mean_mass = np.mean(mass, axis=0)
    assert np.all(np.diff(mean_mass[:10]) < 0)          # sharp early, flatter deep
    assert mean_mass[0] > 0.5 > 0.1 > mean_mass[-1]


# ---------------------------------------------------------------------- variant worlds
def _variant_world(seed=0):
    spec = dataclasses.replace(get_regime("small"), name="variants", vocab_size=24,
                               successors=2, variants=3, variant_spread=1.5,
                               variant_noise=0.7, mismatch=0.3)
    return make_world(spec, seed=seed)


@pytest.mark.parametrize("temperature", [0.5, 1.0])
def test_variant_world_next_token_depends_on_class_only(temperature):
    w = _variant_world()
    m = w.spec.variants
    # rows are equal exactly for tokens in the same class; there are V / m distinct rows
    rows = np.stack([w.target_row(Context(0, x), (), temperature) for x in range(w.vocab_size)])
    distinct = np.unique(np.round(rows, 12), axis=0)
    assert distinct.shape[0] == w.vocab_size // m
    # within a successor class, relative weights follow the token backgrounds (equal boosts)
    for x in range(w.vocab_size):
        succ = w.succ[x].reshape(-1, m)  # one class per row of m variants
        for cls in succ:
            r = rows[x, cls]
            base = (w.background + w.spec.topic_strength * w.topic_vectors[0])[cls]
            np.testing.assert_allclose(r / r.sum(), np.exp(base / temperature)
                                       / np.exp(base / temperature).sum(), rtol=1e-9)


def test_variant_world_draft_equals_dense_marginals():
    w = _variant_world(seed=3)
    spec = w.spec
    for z, x0 in itertools.product(range(w.n_topics), range(0, w.vocab_size, 5)):
        k = w.draft_kernel(z)
        v = w.vocab_size
        q = dense_law(dense_logits(k.base, k.succ, k.boost), spec.calibration)
        u = dense_law(k.base[None], spec.calibration)[0]
        mu = np.eye(v)[x0]
        lq = w.draft(Context(z, x0))
        for d in range(1, spec.depth + 1):
            eta = spec.degradation * (d - 1) / max(spec.depth - 1, 1)
            junk = spec.junk * d / spec.depth
            mu = mu @ ((1 - eta) * q + eta * np.outer(np.ones(v), u))
            np.testing.assert_allclose(np.exp(lq[d - 1]), (1 - junk) * mu + junk / v,
                                       atol=1e-13)


def test_variant_spec_validation():
    with pytest.raises(ValueError, match="variants must divide"):
        dataclasses.replace(get_regime("small"), variants=3)
    with pytest.raises(ValueError, match="successors \\* variants"):
        dataclasses.replace(get_regime("small"), variants=4, successors=2)
    # shrinking a variant regime to a V that cannot hold its variants falls back to m = 1
    assert make_world("low-entropy", seed=0, vocab_size=50).spec.variants == 1


def test_kernel_row_class_tables_are_bit_identical():
    """A word-class world's target kernels compute per-row tables once per class (issue 23);
    every table and the argmax equal the plain per-token computation bit for bit."""
    from treespec_sim.synth.kernel import SparseBoostKernel

    w = make_world("math500", seed=3, vocab_size=2048)
    assert w.spec.variants > 1
    base = w.background + w.spec.topic_strength * w.topic_vectors[1]
    for t in (0.0, 1.0 / w.spec.logit_scale, 0.7):
        plain = SparseBoostKernel(base, w.succ, w.boost, t, validate=False)
        fast = SparseBoostKernel(base, w.succ, w.boost, t, validate=False,
                                 row_class=w.drafter._cls_of)
        assert np.array_equal(plain.argmax(np.arange(2048)), fast.argmax(np.arange(2048)))
        if t > 0:
            for name in ("_log_z", "_base_mass", "_corr", "_base_law"):
                assert np.array_equal(getattr(plain, name), getattr(fast, name)), name
            a, b = np.arange(0, 2048, 7), np.arange(2047, -1, -7)
            assert np.array_equal(plain.rows(a), fast.rows(a))
            assert np.array_equal(plain.edge_prob(a, b), fast.edge_prob(a, b))
            r1, r2 = np.random.default_rng(0), np.random.default_rng(0)
            assert np.array_equal(plain.sample(a, r1), fast.sample(a, r2))
            assert plain.sample(5, r1) == fast.sample(5, r2)
        assert np.array_equal(w.target_kernel(1, t * w.spec.logit_scale).argmax(np.arange(2048)),
                              plain.argmax(np.arange(2048)))
