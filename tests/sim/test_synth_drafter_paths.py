"""The word-class drafter's fast paths against plain references, bit for bit.

* the class chain ``h_1..h_L`` against the textbook loop (one sparse product and one dot per
  depth, as :mod:`treespec_sim.synth.drafter` documents it);
* every row's top-``k`` list (single rows and all rows at once) against ranking the dense row,
  with the near-floor path (:meth:`ClassLogMarginals._top_above_floor`) shown to run and to
  decide rows;
* the correction proposal against its formula written out term by term.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from treespec_sim import numerics
from treespec_sim.marginals import ranked_candidates
from treespec_sim.numerics import fixed_exp, fixed_log
from treespec_sim.synth import get_regime, make_world
from treespec_sim.synth.drafter import ClassLogMarginals


def _world(regime: str, vocab: int, **knobs):
    spec = dataclasses.replace(get_regime(regime), name=f"{regime}-test", **knobs)
    return make_world(spec, seed=3, vocab_size=vocab)


def _reference_chain(drafter, topic: int, last_token: int) -> np.ndarray:
    """``h_d = (1 - eta_d) (G^T nu + nu . pi) + eta_d``, ``nu = w_cls h_{d-1}``, ``nu_0 = e_c0``;
    ``G^T nu`` by scipy, ``nu . pi`` by numerics.dot (its order is tested apart)."""
    tab = drafter._class_table(topic)
    nu = np.zeros(tab.pi.shape[0])
    nu[drafter._cls_of[last_token]] = 1.0
    out = []
    for d in range(drafter.depth):
        h = tab.gt @ nu
        h += numerics.dot(nu, tab.pi)
        if drafter.eta[d]:
            h *= 1.0 - drafter.eta[d]
            h += drafter.eta[d]
        out.append(h)
        nu = tab.w_cls * h
    return np.array(out)


@pytest.mark.parametrize("regime", ["math500", "mid-entropy"])   # eta = 0; eta > 0
def test_class_chain_is_the_reference_loop_bit_for_bit(regime):
    world = _world(regime, 4096)
    rng = np.random.default_rng(0)
    for _ in range(5):
        ctx = world.sample_context(rng)
        tab = world.drafter._class_table(ctx.topic)
        got = world.drafter._chain(tab, ctx.last_token)[0]
        np.testing.assert_array_equal(got, _reference_chain(world.drafter, ctx.topic,
                                                            ctx.last_token))


@pytest.mark.parametrize("regime,knobs", [("math500", {}), ("gsm8k", {}), ("alpaca", {}),
                                          ("math500", {"junk": 0.0})])
def test_top_lists_rank_the_dense_rows_and_the_floor_path_runs(monkeypatch, regime, knobs):
    world = _world(regime, 8192, **knobs)
    decided = []
    original = ClassLogMarginals._top_above_floor

    def counting(self, row, k):
        got = original(self, row, k)
        decided.append(got is not None)
        return got

    monkeypatch.setattr(ClassLogMarginals, "_top_above_floor", counting)
    rng = np.random.default_rng(1)
    for _ in range(6):
        ctx = world.sample_context(rng)
        dense = world.draft(ctx)
        for k in (1, 64, 70, 512):
            lazy = world.drafter.lazy_log_marginals(ctx.topic, ctx.last_token)
            every = lazy.top_all(k)
            for row in range(world.depth):
                want = ranked_candidates(dense[row], -np.inf, k)
                for got in (every[row], lazy.top(row, k)):
                    np.testing.assert_array_equal(got[0], want[0])
                    np.testing.assert_array_equal(got[1], want[1])
            world.drafter._lazy.clear()      # the next k starts from a fresh object
    if regime in ("math500", "gsm8k") and not knobs:
        # sharp first rows: a k-th value a few ulps above the junk floor j / V
        assert any(decided), "no row took the near-floor path; the test no longer covers it"


def _reference_conditional(world, ctx, depth: int, parent: int) -> np.ndarray:
    """q̂ = (1 - kappa) q_d + kappa ((1 - j) ((1 - eta) Q[a] + eta u) + j / V), term by term,
    with q_d = (1 - j) s_d + j / V and the sharpened marginal s_d from the class chain and the
    row's norms: exp(beta (log h[c(b)] + log w[b]) - m) / Z (treespec's own log and exp), or
    w[b] h[c(b)] where beta = 1."""
    drafter = world.drafter
    d = depth - 1
    j, eta, kappa = drafter.junk[d], drafter.eta[d], drafter.correction_quality
    k = drafter.kernel(ctx.topic)
    lazy = drafter.lazy_log_marginals(ctx.topic, ctx.last_token)
    h = lazy._h[d]
    tab = drafter._class_table(ctx.topic)
    a = (1.0 - kappa) * (1.0 - j)
    if drafter.beta[d] != 1.0:
        norm_m, norm_z = lazy._norms()
        z = fixed_log(h)[drafter._cls_of] + tab.log_w
        z *= drafter.beta[d]
        z -= norm_m[d]
        e = fixed_exp(z)
        a = a / norm_z[d]
    else:
        e = tab.w * h[drafter._cls_of]
    shared = e * a + j / world.vocab_size
    if eta:
        shared += kappa * (1.0 - j) * eta * k.base_law
    scale = kappa * (1.0 - j) * (1.0 - eta)
    out = np.multiply(k.base_law, scale * float(k.base_mass[parent])) + shared
    out[k.succ[parent]] += scale * k.correction[parent]
    return out


@pytest.mark.parametrize("regime", ["math500", "mid-entropy", "alpaca"])
def test_conditional_is_its_formula_bit_for_bit(regime):
    world = _world(regime, 4096)
    rng = np.random.default_rng(2)
    for _ in range(3):
        ctx = world.sample_context(rng)
        for depth, parent in ((1, ctx.last_token), (2, 5), (7, 77), (world.depth, 1)):
            got = world.draft_conditional(ctx, depth, parent)
            np.testing.assert_array_equal(got, _reference_conditional(world, ctx, depth, parent))


@pytest.mark.parametrize("regime", ["math500", "aime25", "mid-entropy"])
def test_shared_law_is_the_dense_marginals_mixture(regime):
    # the factored shared part (norms, treespec's log/exp) is (1 - kappa) q_d + kappa j / V
    # (+ kappa (1 - j) eta u) with q_d the drafter's dense marginal, up to rounding
    world = _world(regime, 4096)
    dr = world.drafter
    rng = np.random.default_rng(5)
    for _ in range(2):
        ctx = world.sample_context(rng)
        q = np.exp(world.draft(ctx))
        for d in range(dr.depth):
            j, eta, kappa = dr.junk[d], dr.eta[d], dr.correction_quality
            u = dr.kernel(ctx.topic).base_law
            got = dr._shared_law(ctx.topic, ctx.last_token, d, u if eta else None,
                                 kappa * (1.0 - j) * eta)
            want = (1.0 - kappa) * q[d] + kappa * j / world.vocab_size + kappa * (1 - j) * eta * u
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
            assert abs(got.sum() - (1.0 - kappa * (1.0 - j) * (1.0 - eta))) < 1e-12


@pytest.mark.parametrize("regime,knobs", [("math500", {}), ("gsm8k", {}), ("mbpp", {}),
                                          ("math500", {"junk": 0.0})])   # no floor: no skip
def test_shared_law_forms_only_tokens_off_the_floor_and_is_its_definition_bit_for_bit(regime,
                                                                                       knobs):
    # the compiled law skips the classes the norms leave out; every token must still be the
    # definition's float: exp(beta (log h + log w) - m) * a + floor (+ c1 u), numpy in that order
    world = _world(regime, 8192, **knobs)
    dr = world.drafter
    assert (dr.beta != 1.0).any()
    rng = np.random.default_rng(8)
    for _ in range(3):
        ctx = world.sample_context(rng)
        lazy = world.draft_lazy(ctx)
        tab = dr._class_table(ctx.topic)
        norm_m, norm_z = lazy._norms()
        u = dr.kernel(ctx.topic).base_law
        for d in np.flatnonzero(dr.beta != 1.0).tolist():
            j = float(dr.junk[d])
            a = (1.0 - dr.correction_quality) * (1.0 - j) / float(norm_z[d])
            x = fixed_log(lazy._h[d])[dr._cls_of]
            x += tab.log_w
            x *= dr.beta[d]
            x -= norm_m[d]
            for with_u in (False, True):
                want = fixed_exp(x) * a + j / world.vocab_size
                if with_u:
                    want += 0.3 * u
                got = dr._shared_law(ctx.topic, ctx.last_token, d, u if with_u else None, 0.3)
                np.testing.assert_array_equal(got, want)
