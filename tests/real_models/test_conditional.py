"""The real drafter's conditional correction (``ModelBackend.draft_conditional``).

What is checked on the shipped tiny models (``docs/real_models.md``, "The conditional
correction"):

* the law given a sampled parent is a second drafter pass with the parent written in place of a
  mask: at depth 1 it is the marginal, below it differs from the marginal where it must (a
  parent the block never saw), batched and single passes agree, and every pass is recorded;
* a corrected round's exact E[tau] equals a direct computation from its own tree, its proposal
  rows and target rows recomputed by plain causal forwards (an independent RRS/RRSw recursion
  written here, not the package's verifier);
* the corrected fills are lossless (chi-square on the first two tokens) and the planted pass-1
  reuse bug is caught by the same test.
"""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch

from real_models._decode import run_from
from real_models.backend import ModelBackend, prefill
from real_models.validate import (
    ALPHA,
    law_bins,
    law_test,
    load_prompts,
    planted_pass1_reuse,
)
from treespec_sim import engine


@pytest.fixture(scope="module")
def prompts(bundle):
    torch.set_num_threads(1)
    return load_prompts(bundle, 4, 64)


def _fresh(bundle, prompt):
    be = ModelBackend(bundle)
    ctx = be.start(prefill(bundle, prompt))
    return be, ctx, be.draft(ctx)


def _softmax64(row) -> np.ndarray:
    z = np.asarray(row, dtype=np.float64)
    z = np.exp(z - z.max())
    return z / z.sum()


def _tv(a, b) -> float:
    return 0.5 * float(np.abs(np.asarray(a) - np.asarray(b)).sum())


def test_depth_one_is_the_marginal_and_deeper_laws_depend_on_the_parent(bundle, prompts):
    be, ctx, log_q = _fresh(bundle, prompts[0])
    q1 = be.draft_conditional(ctx, 1, ctx.last_token)
    np.testing.assert_allclose(q1, _softmax64(log_q[0]), atol=1e-6)
    assert ctx.corrections == []                 # no pass at depth 1
    with pytest.raises(ValueError, match="parent is the root"):
        be.draft_conditional(ctx, 1, (ctx.last_token + 1) % bundle.vocab_size)
    marg2 = _softmax64(log_q[1])
    # a parent the drafter ranks low at depth 1: the block [b, x, m, ...] is not [b, m, m, ...]
    low = int(np.argsort(log_q[0])[bundle.vocab_size // 2])
    top = int(np.argmax(log_q[0]))
    c_low, c_top = be.draft_conditional(ctx, 2, low), be.draft_conditional(ctx, 2, top)
    assert abs(c_low.sum() - 1) < 1e-9 and abs(c_top.sum() - 1) < 1e-9
    assert _tv(c_low, marg2) > 0.2, "the correction must see the parent written in the block"
    assert _tv(c_low, c_top) > 0.2, "two parents, one law: the parent is not read"
    assert [(d, k) for d, k, _ in ctx.corrections] == [(2, 1), (2, 1)]
    again = be.draft_conditional(ctx, 2, low)     # cached for the round: no new pass
    assert again is c_low and len(ctx.corrections) == 2
    assert not c_low.flags.writeable


def test_batched_pass_equals_single_passes(bundle, prompts):
    be, ctx, log_q = _fresh(bundle, prompts[1])
    parents = [int(x) for x in np.argsort(log_q[2])[-6:]]
    batch = be.draft_conditional_batch(ctx, 3, parents)
    assert [(d, k) for d, k, _ in ctx.corrections] == [(3, 6)]
    be2, ctx2, _ = _fresh(bundle, prompts[1])
    for x, row in zip(parents, batch, strict=True):
        np.testing.assert_allclose(be2.draft_conditional(ctx2, 3, x), row, atol=1e-5)


def test_the_correction_refuses_after_verification_and_bad_arguments(bundle, prompts):
    be, ctx, _ = _fresh(bundle, prompts[0])
    for bad in (0, bundle.depth + 1, True):
        with pytest.raises(ValueError, match="depth"):
            be.draft_conditional(ctx, bad, 3)
    with pytest.raises(ValueError, match="outside the vocabulary"):
        be.draft_conditional(ctx, 2, bundle.vocab_size)
    rnd = engine.run_round(be, ctx, method="sampled-chain-corrected", temperature=1.0,
                           rng=np.random.default_rng(0))
    with pytest.raises(ValueError, match="uncommitted verification"):
        be.draft_conditional(ctx, 2, int(rnd.tree.token[1]))


# ----------------------------------------------------------------------------- E[tau]
def _direct_tau(tree, target_rows, proposal_rows, scheme: str) -> float:
    """E[tau] of recursive rejection sampling on ``tree`` (RRS for i.i.d. draws, RRSw without
    replacement), written from the rule's definition (``docs/theory/verification.md``)."""
    kids = tree.child_lists

    def value(v: int) -> float:
        if kids[v].size == 0:
            return 1.0                           # the bonus token
        r = np.array(target_rows[v], dtype=np.float64)
        q = np.array(proposal_rows[v], dtype=np.float64)
        reach, total = 1.0, 1.0
        for c in kids[v]:
            x = int(tree.token[c])
            qi = q / q.sum()
            a = 1.0 if r[x] >= qi[x] else r[x] / qi[x]
            total += reach * a * value(int(c))
            reach *= 1.0 - a
            if reach <= 0.0:
                break
            r = np.maximum(r - qi, 0.0)
            r /= r.sum()
            if scheme == "without_replacement":
                q[x] = 0.0
        return total

    return value(0)


@pytest.mark.parametrize(("method", "budget", "scheme"), [
    ("sampled-chain-corrected", None, "iid"), ("tsubame-rrs", 24, "iid"),
    ("tsubame-rrsw", 24, "without_replacement")])
def test_expected_tau_of_a_corrected_round_is_its_own_trees(bundle, prompts, method, budget,
                                                           scheme):
    T = 1.0
    be, ctx, _ = _fresh(bundle, prompts[0])
    rnd = engine.run_round(be, ctx, method=method, budget=budget, temperature=T,
                           rng=np.random.default_rng(7), sample=False)
    tree = rnd.tree
    assert rnd.draft.scheme == scheme and tree.max_depth >= 2
    # the proposal rows are the corrections given each node's own sampled path, recomputed
    paths = [(), *tree.paths()]
    for v in np.flatnonzero(~tree.is_leaf()):
        d = int(tree.depth[v]) + 1
        if d == 1:
            continue
        fresh = be.drafting.conditional_probs(ctx.draft_cache, ctx.last_token, ctx.length, d,
                                              [tuple(paths[v])])[0]
        np.testing.assert_allclose(rnd.proposal[int(v)], fresh, atol=1e-5)
    # target rows by one plain causal forward per node's path (not the tree forward)
    rows = np.stack([torch.softmax(bundle.target.sequential_logits(
        [*ctx.tokens, *p])[-1].double() / T, dim=-1).cpu().numpy() for p in paths])
    direct = _direct_tau(tree, rows, rnd.proposal, scheme)
    assert rnd.expected_tau == pytest.approx(direct, rel=1e-4, abs=1e-4)
    assert rnd.expected_tau > 1.0


# ----------------------------------------------------------------------------- the law
def test_corrected_fills_are_lossless_and_the_planted_reuse_is_caught(bundle, prompts):
    T, n = 1.0, 300
    prompt = prompts[3]
    bin_of, probs = law_bins(bundle, prompt, T, n)
    assert probs.size >= 4
    pf = prefill(bundle, prompt, with_drafter=True)
    for i, (method, budget, rule) in enumerate((("sampled-chain-corrected", None, "rrs"),
                                                ("tsubame-rrsw", 16, "rrsw"))):
        rng = np.random.default_rng(11 + i)
        samples = [run_from(bundle, pf, 2, method=method, rule=rule, budget=budget,
                            temperature=T, rng=rng).tokens for _ in range(n)]
        _, p, _ = law_test(samples, bin_of, probs)
        assert p >= ALPHA, (method, p)
    rng = np.random.default_rng(13)
    bad = [planted_pass1_reuse(bundle, pf, 2, temperature=T, rng=rng, budget=16)
           for _ in range(n)]
    _, p_bad, _ = law_test(bad, bin_of, probs)
    assert p_bad < ALPHA


class _Unbatched:
    """The backend without ``draft_conditional_batch``: run_round then asks node by node."""

    def __init__(self, backend):
        self._backend = backend

    def __getattr__(self, name):
        if name == "draft_conditional_batch":
            raise AttributeError(name)
        return getattr(self._backend, name)


def test_run_round_makes_one_correction_pass_per_level_with_the_same_draws(bundle, prompts):
    be, ctx, _ = _fresh(bundle, prompts[0])
    batched = engine.run_round(be, ctx, method="tsubame-rrsw", budget=48, temperature=1.0,
                               rng=np.random.default_rng(4), sample=False)
    be2, ctx2, _ = _fresh(bundle, prompts[0])
    single = engine.run_round(_Unbatched(be2), ctx2, method="tsubame-rrsw", budget=48,
                              temperature=1.0, rng=np.random.default_rng(4), sample=False)
    tree = batched.tree
    levels = {int(tree.depth[v]) + 1 for v in np.flatnonzero(~tree.is_leaf())} - {1}
    assert len(ctx2.corrections) > len(levels) >= 1                     # a pass per node
    assert sorted(d for d, _, _ in ctx.corrections) == sorted(levels)   # one pass per level
    assert batched.correction_passes == single.correction_passes == len(levels)
    assert single.tree == tree
    np.testing.assert_allclose(np.asarray(single.proposal), np.asarray(batched.proposal),
                               atol=1e-5)


def test_a_node_law_reads_its_whole_path(bundle, prompts):
    # two depth-3 nodes with the same parent token but different depth-1 tokens: the
    # path-conditioned laws differ, the first-order (parent-only) ones are one law
    be, ctx, log_q = _fresh(bundle, prompts[1])
    a, b = (int(t) for t in np.argsort(log_q[0])[::-1][:2])
    x = int(np.argmax(log_q[1]))
    pa = be.draft_conditional(ctx, 3, x, path=(a, x))
    pb = be.draft_conditional(ctx, 3, x, path=(b, x))
    assert 0.5 * np.abs(pa - pb).sum() > 1e-3
    first = be.draft_conditional(ctx, 3, x)
    assert not np.array_equal(first, pa) and not np.array_equal(first, pb)
    with pytest.raises(ValueError, match="ending with its parent token"):
        be.draft_conditional(ctx, 3, x, path=(a, (x + 1) % bundle.vocab_size))
    with pytest.raises(ValueError, match="must hold 2 tokens"):
        be.draft_conditional(ctx, 3, x, path=(x,))

