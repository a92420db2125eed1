"""The drafter's compiled class chain (treespec_sim/cworld.c) against the numpy code it replaces.

The kernel only adds, multiplies and compares, in the numpy code's order; the numbers of the
simulator must not depend on whether it was built. So every comparison here is bit for bit
(``np.array_equal``), on every vector path the CPU has, and ``compiled.world_kernel = None``
switches the drafter to its numpy path in the same process.
"""

import shutil

import numpy as np
import pytest
import scipy.sparse as sp

from treespec_sim import compiled, numerics
from treespec_sim.engine import run_round
from treespec_sim.policies.sampled import PreparedLaw, draw_children
from treespec_sim.synth import drafter as drafter_mod
from treespec_sim.synth import make_world
from treespec_sim.verify.traversal import traversal_round_law

kern = compiled.world_kernel
needs_kernel = pytest.mark.skipif(kern is None, reason="treespec_sim.cworld is not built")
SIMD_PATHS = kern.simd_paths() if kern is not None else ["numpy"]


@pytest.fixture(params=SIMD_PATHS)
def simd_path(request):
    """Run the test on one of the chain's vector paths, then restore the best one."""
    if kern is None:
        pytest.skip("treespec_sim.cworld is not built")
    kern.set_simd(request.param)
    yield request.param
    kern.set_simd(SIMD_PATHS[-1])


def test_world_kernel_is_built_where_a_compiler_exists():
    if shutil.which("cc") or shutil.which("gcc"):
        assert kern is not None, "a C compiler exists but treespec_sim.cworld was not built"
        assert kern.simd() in ("generic", "avx2", "avx512")


def _same(a, b):
    a, b = np.asarray(a), np.asarray(b)
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=True)


@pytest.fixture(scope="module")
def worlds():
    # calibrated regimes (eta > 0 at depth > 1, beta != 1) and small custom ones
    return [make_world("math500", seed=0), make_world("mt-bench", seed=1),
            make_world("humaneval", seed=2, vocab_size=4096)]


@needs_kernel
def test_chain_equals_the_scipy_product_on_every_path(worlds, simd_path):
    for world in worlds:
        dr = world.drafter
        rng = np.random.default_rng(3)
        for topic in rng.integers(0, world.n_topics, size=3).tolist():
            tab = dr._class_table(topic)
            for tok in rng.integers(0, world.vocab_size, size=4).tolist():
                h = dr._chain(tab, tok)
                assert _same(h, np.stack(list(dr._class_h(tab, tok))))


@needs_kernel
def test_the_chain_kernel_is_chosen_among_the_paths_and_set_simd_pins_it(worlds):
    """The chain's kernel is chosen by timing (every kernel gives the same floats: the tests
    above run each); set_simd(name) runs that path's kernel, as the tests need."""
    dr = worlds[0].drafter
    tab = dr._class_table(0)
    try:
        chosen = kern.tune_chain(tab.sell)
        assert chosen in SIMD_PATHS and kern.chain_kernel() == chosen
        assert kern.simd() == SIMD_PATHS[-1]     # the other passes keep the best vector path
        assert _same(dr._chain(tab, 5), np.stack(list(dr._class_h(tab, 5))))
        for path in SIMD_PATHS:
            kern.set_simd(path)
            assert kern.chain_kernel() == path and kern.simd() == path
    finally:
        kern.set_simd(SIMD_PATHS[-1])
    with pytest.raises(ValueError, match="PyCapsule"):
        kern.tune_chain(np.zeros(3))


@needs_kernel
def test_chain_without_eta_and_with_dead_rows(simd_path):
    # rows of G^T with no entry (a class nobody leads to), lengths from 0 to many
    rng = np.random.default_rng(0)
    n = 203
    dense = (rng.random((n, n)) < rng.random((n, 1)) ** 4) * rng.random((n, n))
    dense[:, :7] = 0.0
    g = sp.csr_matrix(dense)
    gt_rows = g.tocsc()
    w_cls = rng.random(n)
    sell = kern.sell_new(gt_rows.indptr.astype(np.int64), gt_rows.indices.astype(np.int32),
                         gt_rows.data, w_cls)
    nu = rng.random(n)
    for has_eta, scale, shift in ((False, 1.0, 0.0), (True, 0.75, 0.25)):
        h, nu_out = np.empty(n), np.empty(n)
        kern.chain_step(sell, nu, nu_out, 0.125, scale, shift, has_eta, h)
        ref = g.T @ nu
        ref += 0.125
        if has_eta:
            ref *= scale
            ref += shift
        assert _same(h, ref)
        assert _same(nu_out, w_cls * ref)


@needs_kernel
@pytest.mark.parametrize("n", [65536, 65537])
def test_chain_on_both_sides_of_16_bit_columns(simd_path, n):
    """Up to 65536 classes the scalar kernel reads 16-bit column indices, above 32-bit ones:
    the same products either way (the largest index, 65535 or 65536, is among them)."""
    rng = np.random.default_rng(n)
    g = sp.random(n, n, density=4 / n, format="csr", random_state=rng)
    g = (g + sp.csr_matrix(([0.5, 0.25], ([1, n - 1], [n - 1, 0])), shape=(n, n))).tocsr()
    gt_rows = g.tocsc()
    w_cls = rng.random(n)
    sell = kern.sell_new(gt_rows.indptr.astype(np.int64), gt_rows.indices.astype(np.int32),
                         gt_rows.data, w_cls)
    nu = rng.random(n)
    h, nu_out = np.empty(n), np.empty(n)
    kern.chain_step(sell, nu, nu_out, 0.125, 0.75, 0.25, True, h)
    ref = g.T @ nu
    ref += 0.125
    ref *= 0.75
    ref += 0.25
    assert _same(h, ref) and _same(nu_out, w_cls * ref)


@needs_kernel
def test_chain_rejects_bad_buffers():
    n = 16
    g = sp.random(n, n, density=0.3, format="csr", random_state=0)
    gt_rows = g.tocsc()
    sell = kern.sell_new(gt_rows.indptr.astype(np.int64), gt_rows.indices.astype(np.int32),
                         gt_rows.data, np.ones(n))
    nu = np.ones(n)
    with pytest.raises(ValueError, match="nu_out must not be nu"):
        kern.chain_step(sell, nu, nu, 0.0, 1.0, 0.0, False, np.empty(n))
    with pytest.raises(ValueError, match="h: expected a C-contiguous float64 array"):
        kern.chain_step(sell, nu, np.empty(n), 0.0, 1.0, 0.0, False, np.empty(n, dtype=np.int64))
    with pytest.raises(ValueError, match="indices: expected a C-contiguous int32 array"):
        kern.sell_new(gt_rows.indptr.astype(np.int64), gt_rows.indices.astype(np.int64),
                      gt_rows.data, np.ones(n))
    with pytest.raises(ValueError, match="h: expected 16 items"):
        kern.chain_step(sell, nu, np.empty(n), 0.0, 1.0, 0.0, False, np.empty(n - 1))
    with pytest.raises(ValueError, match="w_cls: expected 16 items"):
        kern.sell_new(gt_rows.indptr.astype(np.int64), gt_rows.indices.astype(np.int32),
                      gt_rows.data, np.ones(n + 1))


def _lazy_state(lz, ks=(1, 5, 64, 300)):
    out = [lz._h, lz._class_max(), *lz._norms()]
    for k in ks:
        out += [x for pair in lz.top_all(k) for x in pair]
    for d in (0, lz.shape[0] - 1):
        out += list(lz.top(d, 512))
    out.append(lz.dense())
    return out


@needs_kernel
def test_lazy_marginals_equal_the_numpy_path(worlds, monkeypatch):
    # everything a round reads: chain, class maxima, norms, top lists (vectorised and per row),
    # the dense array -- with the kernel, then with the numpy path, on fresh contexts
    for world in worlds:
        rng = np.random.default_rng(11)
        ctxs = [world.sample_context(rng) for _ in range(6)]
        with_kernel = []
        for ctx in ctxs:
            world.drafter._lazy.clear()
            with_kernel.append(_lazy_state(world.draft_lazy(ctx)))
        monkeypatch.setattr(compiled, "world_kernel", None)
        for ctx, got in zip(ctxs, with_kernel, strict=True):
            world.drafter._lazy.clear()
            want = _lazy_state(world.draft_lazy(ctx))
            assert len(got) == len(want)
            assert all(_same(a, b) for a, b in zip(got, want, strict=True))
        monkeypatch.setattr(compiled, "world_kernel", kern)
        world.drafter._lazy.clear()


def _kth_pair_answer(v, k):
    thr, v_out, cand_r, cand_c = drafter_mod._kth_pair(v, k)
    exact = v_out < thr
    cols = []
    for i in range(v.shape[0]):
        sel = cand_c[(cand_r == i) & (v[cand_r, cand_c] >= thr[cand_r])]
        cols.append(np.sort(sel))
    return exact, cols, v_out


@needs_kernel
@pytest.mark.parametrize("kind", ["distinct", "ties", "plateau", "neginf"])
@pytest.mark.parametrize("k", [1, 3, 64, 200])
def test_select_top_equals_kth_pair(kind, k):
    rng = np.random.default_rng(k)
    n = 2048
    if kind == "distinct":
        v = rng.random((9, n))
    elif kind == "ties":
        v = rng.integers(0, 40, size=(9, n)).astype(float)
    elif kind == "plateau":  # most of a row at one value: the sampled cut lets too much through
        v = np.where(rng.random((9, n)) < 0.9, 0.5, rng.random((9, n)))
    else:
        v = np.where(rng.random((9, n)) < 0.5, -np.inf, rng.standard_normal((9, n)))
    got = drafter_mod._select_compiled(kern, v, k)
    assert got is not None
    exact, idx, v_out = got
    want_exact, want_cols, want_out = _kth_pair_answer(v, k)
    assert _same(exact, want_exact)
    assert _same(v_out, want_out)
    for i in np.flatnonzero(exact):
        assert _same(idx[i], want_cols[i].astype(np.int64))


@needs_kernel
def test_select_top_hands_nan_rows_to_numpy():
    v = np.random.default_rng(0).random((3, 1024))
    v[1, 17] = np.nan
    assert drafter_mod._select_compiled(kern, v, 8) is None


@needs_kernel
@pytest.mark.parametrize("kind", ["distinct", "ties", "neginf", "nan"])
def test_rank_top_equals_rank_rows(kind):
    rng = np.random.default_rng(5)
    r, n, k = 12, 256, 64
    toks = np.stack([rng.permutation(10 * n)[:n] for _ in range(r)]).astype(np.int64)
    if kind == "distinct":
        vals = rng.standard_normal((r, n))
    elif kind == "ties":
        vals = rng.integers(0, 5, size=(r, n)).astype(float)
    elif kind == "neginf":
        vals = np.where(rng.random((r, n)) < 0.8, -np.inf, rng.standard_normal((r, n)))
    else:
        vals = rng.standard_normal((r, n))
        vals[3, 9] = np.nan
    got = drafter_mod._rank_compiled(toks, vals, k)
    want = drafter_mod._rank_rows(toks, vals, k)
    assert _same(got[0], want[0]) and _same(got[1], want[1])



def _norms_numpy(h, w_max, beta, sums):
    """ClassLogMarginals._norms' numpy path (drafter._norm_row, the definition)."""
    vmax = h * w_max
    m, z = np.full(h.shape[0], np.nan), np.full(h.shape[0], np.nan)
    for d in np.flatnonzero(beta != 1.0):
        m[d], z[d] = drafter_mod._norm_row(vmax[d], float(beta[d]), sums[d])
    return vmax, m, z


@needs_kernel
def test_class_norms_equal_numpys_on_every_path(simd_path):
    # the compiled norms against fixed_log / fixed_exp / lane_sum8 in numpy: widths that are
    # not a multiple of 8 (the tails), class maxima of 0 and subnormal ones (the log's scalar
    # lanes), exponents so low that exp underflows (the exp's scalar lanes), beta = 1 rows
    rng = np.random.default_rng(5)
    for n, L in ((1, 2), (7, 3), (8, 3), (13, 4), (8192, 3), (8195, 2)):
        h = rng.random((L, n)) * np.exp(rng.uniform(-60, 0, (L, n)))
        w_max = np.exp(rng.uniform(-300, 0, n))
        if n > 8:
            h[0, 3] = 0.0
            w_max[5] = 1e-310 / max(h[:, 5].max(), 1e-300)
        beta = np.linspace(1.0, 3.0, L)
        sums = 1.0 + 3.0 * rng.random((L, n))
        m, z = np.full(L, np.nan), np.full(L, np.nan)
        assert kern.class_norms(h, w_max, beta, sums, m, z)
        vmax, *want = _norms_numpy(h, w_max, beta, sums)
        for got, ref in zip((m, z), want, strict=True):
            assert _same(got, ref), (n, L)
        assert np.isnan(m[0]) and np.isnan(z[0])            # beta = 1: not sharpened
        # and the values are the normalisers numpy's own log / exp give over every class, to
        # rounding: the terms below e^-64 of the largest that the sum leaves out do not show
        for d in range(1, L):
            lv = np.log(vmax[d])
            assert m[d] == pytest.approx(beta[d] * lv.max(), rel=1e-14)
            ref_z = np.exp(lv * beta[d] - beta[d] * lv.max()) @ sums[d]
            assert z[d] == pytest.approx(ref_z, rel=1e-13)
    h = np.ones((2, 16))
    h[1, 4] = np.nan
    m, z = np.empty(2), np.empty(2)
    assert not kern.class_norms(h, np.ones(16), np.array([1.0, 2.0]), np.ones((2, 16)), m, z)
    with pytest.raises(ValueError, match="sums: expected 32 items"):
        kern.class_norms(h, np.ones(16), np.array([1.0, 2.0]), np.ones(31), m, z)


@needs_kernel
def test_class_norms_candidates_are_the_classes_at_or_above_the_cut(simd_path):
    # cand[d, :counts[d]]: the classes with v >= vmax e^(-64 / beta), in column order, for
    # widths around the AVX-512 path's 16-class steps, with rows where every class is kept (its
    # whole-vector stores then end exactly at the row's end) and rows where one is
    rng = np.random.default_rng(8)
    for n in (15, 16, 17, 31, 32, 33, 1000, 8192):
        L = 4
        h = np.exp(rng.uniform(-200.0, 0.0, (L, n)))
        h[1] = 1.0 + rng.random(n)                        # every class kept
        h[2] = np.exp(-500.0)
        h[2, n // 2] = 1.0                                # one class kept
        w_max = np.ones(n)
        beta = np.array([1.0, 2.0, 1.5, 3.0])
        m, z = np.empty(L), np.empty(L)
        cand = np.full((L, n), -7, dtype=np.int32)
        counts = np.empty(L, dtype=np.int64)
        assert kern.class_norms(h, w_max, beta, np.ones((L, n)), m, z, cand, counts)
        assert counts[0] == -1                            # beta = 1: no cut
        for d in range(1, L):
            v = h[d] * w_max
            cut = v.max() * numerics.fixed_exp(np.array([-(64.0 / beta[d])]))[0]
            want = np.flatnonzero(v >= cut)
            assert counts[d] == want.size, (n, d)
            assert np.array_equal(cand[d, :counts[d]], want), (n, d)
        assert counts[1] == n and counts[2] == 1


@needs_kernel
def test_norms_leave_out_only_terms_below_the_cut():
    # a row where most classes sit far below the largest: the sum over the classes within
    # e^-64 (the definition) against numpy's log / exp over every class
    rng = np.random.default_rng(6)
    n = 4096
    v = np.exp(rng.uniform(-400.0, 0.0, n))
    v[17] = 1.0
    sums = 1.0 + 3.0 * rng.random(n)
    for beta in (0.5, 1.3, 3.0):
        m, z = drafter_mod._norm_row(v, beta, sums)
        x = beta * np.log(v)
        assert m == pytest.approx(x.max(), abs=1e-13)
        full = np.exp(x - x.max()) @ sums
        assert z == pytest.approx(full, rel=1e-14)
        kept = v >= v.max() * np.exp(-64.0 / beta)
        assert 0 < kept.sum() < n // 2            # the cut leaves most of this row out
        left_out = np.exp(x[~kept] - x.max()) @ sums[~kept]
        assert left_out < 1e-23 * z


@needs_kernel
def test_prepare_law_divides_as_numpy_does(simd_path):
    # the AVX-512 path divides by FMA corrections from one reciprocal (cworld.c, divide_fma):
    # its quotients must be numpy's, for mantissas at the binade edges, divisors at theirs,
    # and the entries it hands to a true division (zeros of both signs, subnormals, huge
    # values, infinities, NaN)
    rng = np.random.default_rng(17)
    V = 1 << 16
    edge = np.where(rng.random(V) < 0.5, 1.0 + rng.integers(0, 4096, V) * 2.0**-52,
                    2.0 - rng.integers(1, 4096, V) * 2.0**-52)
    cases = [rng.random(V), rng.dirichlet(np.ones(V)), np.ldexp(edge, -rng.integers(0, 80, V)),
             np.exp(rng.uniform(-700.0, 0.0, V))]
    odd = rng.random(V)
    odd[::97] = 0.0
    odd[1::97] = -0.0
    odd[2::97] = 5e-320
    odd[3::97] = 2.0**-961
    odd[4::97] = 2.0**901
    cases.append(odd)
    special = rng.random(V)
    special[5] = np.inf
    special[9] = np.nan
    for q in cases:
        block = int(np.sqrt(V - 1)) + 1
        total = q.sum()
        for scale in (1.0, 1.0 + 2.0**-52, 2.0 - 2.0**-52, 0.75 + 2.0**-53, 2.0**-61, 2.0**61):
            row = q * (scale / total) if np.isfinite(total) and total > 0 else q
            out, mass = np.empty(V), np.empty(-(-V // block))
            kern.prepare_law(row, True, block, out, mass)
            assert _same(out, row / row.sum()), scale
    out, mass = np.empty(V), np.empty(-(-V // block))
    kern.prepare_law(special, True, block, out, mass)
    assert _same(out, special / special.sum())


@needs_kernel
def test_prepare_law_equals_numpys_steps(simd_path):
    rng = np.random.default_rng(7)
    for V in (1, 2, 7, 8, 9, 127, 128, 129, 1000, 32768, 40001):
        q = rng.random(V) * np.exp(rng.uniform(-40.0, 5.0, V))
        q[rng.random(V) < 0.3] = 0.0
        q[0] = max(q[0], 1e-3)
        block = int(np.sqrt(V - 1)) + 1 if V > 1 else 1
        nb = -(-V // block)
        ref = q / q.sum()
        ref_mass = np.add.reduceat(ref, np.arange(0, V, block))
        out, mass = np.empty(V), np.empty(nb)
        assert kern.prepare_law(q, True, block, out, mass) == (ref.min(), ref.sum())
        assert _same(out, ref) and _same(mass, ref_mass)
        mass2 = np.empty(nb)
        assert kern.prepare_law(ref, False, block, None, mass2) == (ref.min(), ref.sum())
        assert _same(mass2, ref_mass)
    with pytest.raises(ValueError, match="normalise needs an output array"):
        kern.prepare_law(np.ones(4), True, 2, None, np.empty(2))
    with pytest.raises(ValueError, match="mass: expected 2 items"):
        kern.prepare_law(np.ones(4), False, 2, None, np.empty(3))


@needs_kernel
def test_conditional_rows_and_a_tsubame_round_equal_the_numpy_path(monkeypatch):
    # the drafter's correction proposal and the target's rows (conditional_row) and a whole
    # Tsubame + UniVer round (its laws through prepare_law, the residual steps, the draws, the
    # proposal rows, exact E[tau]) with the kernel and without it
    world = make_world("math500", seed=3)
    rng = np.random.default_rng(8)
    ctxs = [world.sample_context(rng) for _ in range(3)]

    def state():
        out = []
        dr = world.drafter
        for ctx in ctxs:
            dr._lazy.clear()
            dr._conditional_shared.clear()
            for depth, parent in ((2, 5), (7, 123), (15, world.vocab_size - 1)):
                out.append(dr.conditional(ctx.topic, ctx.last_token, depth, parent))
                out.append(world.target_kernel(ctx.topic, 1.0).row(parent))  # the target's
            rnd = run_round(world, ctx, method="tsubame", budget=64, rule="univer",
                            temperature=1.0, rng=np.random.default_rng(9), sample=False)
            out += [rnd.tree.parent, rnd.tree.token, np.array([rnd.expected_tau])]
            out += list(rnd.proposal.laws)
            # the residuals materialised (bonus laws): the exact round law, two steps
            for step in ("univer", "traversal"):
                out.append(traversal_round_law(rnd.tree, rnd.rows, rnd.proposal, step=step))
        return out

    with_kernel = state()
    monkeypatch.setattr(compiled, "world_kernel", None)
    without = state()
    assert len(with_kernel) == len(without)
    for a, b in zip(with_kernel, without, strict=True):
        assert a == b if isinstance(a, dict) else _same(a, b)


@needs_kernel
def test_draws_without_replacement_equal_the_python_loop(monkeypatch):
    # draw_children's compiled loop against its Python loop: the same tokens for the same
    # uniforms, on flat, peaked and mostly-zero laws (blocks with no mass, the last positive
    # token, draws up to the support)
    rng = np.random.default_rng(10)
    for t in range(400):
        V = int(rng.choice([2, 5, 17, 100, 1000, 32768]))
        q = rng.random(V) ** float(rng.choice([1.0, 5.0, 30.0]))
        if t % 4 == 0:
            q[rng.random(V) < 0.7] = 0.0
        if q.sum() == 0.0:
            q[-1] = 1.0
        law = PreparedLaw.of(q / q.sum())
        k = int(min(rng.integers(1, 12), law.support))
        seed = int(rng.integers(1 << 30))
        with_kernel = draw_children(law, k, "without_replacement", np.random.default_rng(seed))
        monkeypatch.setattr(compiled, "world_kernel", None)
        without = draw_children(law, k, "without_replacement", np.random.default_rng(seed))
        monkeypatch.setattr(compiled, "world_kernel", kern)
        assert _same(with_kernel, without), (t, V, k)


@needs_kernel
def test_shared_law_equals_the_numpy_definition_on_every_path(simd_path, monkeypatch):
    # the correction proposal's parent-independent part (drafter._shared_law): every depth
    # (beta = 1 at depth 1, beta > 1 in math500, beta < 1 in aime25, eta > 0 in mid-entropy),
    # with the kernel on this vector path and without it
    worlds = [make_world("math500", seed=0), make_world("aime25", seed=1, vocab_size=4096),
              make_world("mid-entropy", seed=2, vocab_size=4096)]
    assert worlds[2].drafter.eta.max() > 0 and (worlds[1].drafter.beta < 1).any()
    for world in worlds:
        dr = world.drafter
        rng = np.random.default_rng(21)
        ctxs = [world.sample_context(rng) for _ in range(2)]
        got = {}
        for off in (False, True):
            if off:
                monkeypatch.setattr(compiled, "world_kernel", None)
            for ctx in ctxs:
                dr._lazy.clear()
                for d in range(dr.depth):
                    u = dr.kernel(ctx.topic).base_law if dr.eta[d] else None
                    out = dr._shared_law(ctx.topic, ctx.last_token, d, u, 0.25 * dr.eta[d])
                    if off:
                        assert _same(out, got[(ctx, d)]), (world.spec.name, ctx, d)
                    else:
                        got[(ctx, d)] = out
            monkeypatch.setattr(compiled, "world_kernel", kern)


@needs_kernel
def test_shared_law_handles_extreme_exponents(simd_path, monkeypatch):
    # h with a zero, a subnormal and a huge range (exponents below -745: exp underflows to 0
    # or a subnormal, the vector exp hands those lanes to the scalar one), a NaN class, and a
    # length that is not a multiple of a vector
    rng = np.random.default_rng(22)
    n_cls, V = 37, 301
    h = rng.random(n_cls)
    h[3], h[5], h[7], h[11] = 0.0, 5e-320, 1e-300, np.nan
    cls = rng.integers(0, n_cls, V).astype(np.int32)
    w = rng.dirichlet(np.ones(V))
    log_w = np.log(w)
    log_w[::17] = -800.0
    u = rng.dirichlet(np.ones(V))
    for beta, m in ((1.0, 0.0), (2.5, -1.3), (0.4, 0.7)):
        for uu in (None, u):
            out = np.empty(V)
            kern.shared_law(h, cls, w, log_w, beta, m, 0.3, 1e-7, uu, 0.05, out)
            if beta != 1.0:
                x = numerics.fixed_log(h)[cls]
                x += log_w
                x *= beta
                x -= m
                ref = numerics.fixed_exp(x)
            else:
                ref = w * h[cls]
            ref *= 0.3
            ref += 1e-7
            if uu is not None:
                ref += 0.05 * uu
            assert _same(out, ref), (beta, uu is None)
    with pytest.raises(ValueError, match="cls, kept or members: an entry is outside"):
        kern.shared_law(h[:10], cls, w, log_w, 2.0, 0.0, 1.0, 0.0, None, 0.0, np.empty(V))
    with pytest.raises(ValueError, match="log_w: expected 301 items"):
        kern.shared_law(h, cls, w, log_w[:-1], 2.0, 0.0, 1.0, 0.0, None, 0.0, np.empty(V))


@needs_kernel
def test_residual_equals_numpys_lines_on_every_path(simd_path):
    # traversal.py's numpy lines: m = r / r_div * s, rho = base / div, own = max(m - rho, 0),
    # masses = own.sum() and -min(m - rho, 0).sum(); lengths around the pairwise sum's leaves,
    # exact ties (m = rho: d = +0.0), negative zeros and a NaN
    rng = np.random.default_rng(23)
    for V in (1, 5, 8, 9, 127, 128, 129, 1000, 32768):
        r, base = rng.dirichlet(np.ones(V)), rng.dirichlet(np.ones(V))
        base[::3] = r[::3]
        r[1::7] = -0.0
        base[1::7] = 0.0
        for r_div, s, div in ((1.0, 1.0, 1.0), (0.93, 0.4, 1.0), (1.0, 1.0, 0.71),
                              (1.07, 0.55, 0.83)):
            for bad in (False, True):
                rr = r.copy()
                if bad and V > 3:
                    rr[V // 2] = np.nan
                own = np.empty(V)
                got = kern.residual(rr, r_div, s, base, div, own)
                m = rr / r_div if r_div != 1.0 else rr.copy()
                if s != 1.0:
                    m = m * s
                diff = m - (base / div if div != 1.0 else base)
                want_own = np.maximum(diff, 0.0)
                want = (float(want_own.sum()), -float(np.minimum(diff, 0.0).sum()))
                assert _same(own, want_own), (V, r_div, s, div, bad)
                assert _same(np.array(got), np.array(want)), (V, r_div, s, div, bad)


@needs_kernel
def test_shared_law_on_the_kept_classes_only_where_that_is_exact(simd_path):
    # with the norms' kept classes (beta log v_c - m >= -64), the kernel forms only their
    # tokens when every other token provably rounds to floor (x_cut >= -63: a floor of 1e-7),
    # and the whole row otherwise (a floor of 1e-40, where tokens with x in (-130, -64) still
    # count): both the numpy definition's floats, with and without the unigram term
    rng = np.random.default_rng(24)
    n_cls, per = 300, 4
    V = n_cls * per
    members = rng.permutation(V).reshape(n_cls, per).astype(np.int64)
    cls = np.empty(V, dtype=np.int32)
    cls[members.ravel()] = np.repeat(np.arange(n_cls, dtype=np.int32), per)
    h = np.exp(rng.uniform(-60.0, 0.0, n_cls))
    w = rng.dirichlet(np.ones(V))
    log_w = np.log(w)
    w_max = w[members].max(axis=1)
    u = rng.dirichlet(np.ones(V))
    beta = 2.5
    lv = np.log(h * w_max)
    m = beta * lv.max()
    kept = np.flatnonzero(beta * lv - m >= -64.0).astype(np.int32)
    assert 0 < kept.size < n_cls // 2
    for floor in (1e-7, 1e-40):
        for uu in (None, u):
            out = np.empty(V)
            kern.shared_law(h, cls, w, log_w, beta, m, 0.3, floor, uu, 0.05, out, kept,
                            members)
            x = numerics.fixed_log(h)[cls]
            x += log_w
            x *= beta
            x -= m
            ref = numerics.fixed_exp(x) * 0.3
            ref += floor
            if uu is not None:
                ref += 0.05 * uu
            assert _same(out, ref), (floor, uu is None)
    with pytest.raises(ValueError, match="give both kept and members"):
        kern.shared_law(h, cls, w, log_w, beta, m, 0.3, 1e-7, None, 0.0, np.empty(V), kept)


@needs_kernel
def test_factored_residual_equals_the_dense_one(simd_path):
    # the first residual step at a node on the row's factors (w * pi, then the corrections)
    # against the same step on the dense row the target kernel builds
    world = make_world("math500", seed=4)
    k = world.target_kernel(2, 1.0)
    rng = np.random.default_rng(13)
    for a in rng.integers(0, world.vocab_size, 6).tolist():
        w, pi, succ, corr = k.row_factors(a)
        dense = k.row(a)
        base = rng.dirichlet(np.ones(world.vocab_size))
        for s, div in ((1.0, 1.0), (0.37, 0.9)):
            own_f, own_d = np.empty(world.vocab_size), np.empty(world.vocab_size)
            got = kern.residual_factored(w, pi, succ, corr, s, base, div, own_f)
            want = kern.residual(dense, 1.0, s, base, div, own_d)
            assert got == want and _same(own_f, own_d)


@needs_kernel
@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_edge_probs_equal_the_numpy_path(temperature, monkeypatch):
    # the target's edge probabilities Q[a, b] (cworld.edge_probs) against numpy's lines, on a
    # word-class kernel (one correction row per class) and a plain one, at pairs that hit a
    # successor (one correction term) and pairs that do not
    rng = np.random.default_rng(11)
    world = make_world("math500", seed=0)
    small = make_world("humaneval", seed=2, vocab_size=4096)
    kernels = [world.target_kernel(0, temperature), small.target_kernel(1, temperature),
               world.drafter.kernel(2)]
    for k in kernels:
        V = k.vocab_size
        a = rng.integers(0, V, size=400)
        b = rng.integers(0, V, size=400)
        hit = rng.random(400) < 0.5                            # half of them successors
        b[hit] = k.succ[a[hit], rng.integers(0, k.n_successors, size=int(hit.sum()))]
        got = k.edge_prob_trusted(a, b)
        with monkeypatch.context() as m:
            m.setattr(compiled, "world_kernel", None)
            want = k.edge_prob_trusted(a, b)
            assert _same(k.edge_prob(a, b), want)
        assert _same(got, want)
        base = k._base_mass[a] * k._base_law[b]
        succ = (k.succ[a] == b[:, None]).any(axis=1)
        assert succ[hit].all()
        assert _same(want[~succ], base[~succ])   # no successor: the shared term alone
        assert (want[succ] > base[succ]).mean() > 0.5  # a successor: its correction added
    k = kernels[0]
    with pytest.raises(ValueError, match=r"b\[1\] = 40000 is outside"):
        kern.edge_probs(k._base_mass, k._base_law, k.succ, k._corr_rows, k._row_class,
                        np.array([0, 1]), np.array([3, 40000]), np.empty(2))
    with pytest.raises(ValueError, match="out: expected 2 items"):
        kern.edge_probs(k._base_mass, k._base_law, k.succ, k._corr_rows, k._row_class,
                        np.array([0, 1]), np.array([3, 4]), np.empty(3))


@needs_kernel
def test_candidates_form_numpys_products_and_check_their_indices():
    # the top lists' candidates (cworld.candidates) against numpy's gathers and products
    rng = np.random.default_rng(5)
    L, n, m = 3, 50, 4
    h = rng.random((L, n))
    members = rng.permutation(n * m).reshape(n, m).astype(np.int64)
    w = rng.random(n * m)
    rows = np.array([2, 0], dtype=np.int64)
    idx = rng.integers(0, n, size=(2, 5)).astype(np.int64)
    v_out = rng.random(2)
    toks, mu = np.empty((2, 20), dtype=np.int64), np.empty((2, 21))
    kern.candidates(h, rows, idx, members, w, v_out, toks, mu)
    want_t = members[idx].reshape(2, 20)
    assert _same(toks, want_t)
    assert _same(mu[:, :20], (w[want_t].reshape(2, 5, m) * h[rows[:, None], idx][:, :, None])
                 .reshape(2, 20))
    assert _same(mu[:, 20], v_out)
    with pytest.raises(ValueError, match=r"idx\[1, 2\] = 50 is outside \[0, 50\)"):
        bad = idx.copy()
        bad[1, 2] = 50
        kern.candidates(h, rows, bad, members, w, v_out, toks, mu)
    with pytest.raises(ValueError, match=r"rows\[0\] = 3 is outside"):
        kern.candidates(h, np.array([3, 0]), idx, members, w, v_out, toks, mu)
    with pytest.raises(ValueError, match="mu: expected 42 items"):
        kern.candidates(h, rows, idx, members, w, v_out, toks, np.empty((2, 20)))


@needs_kernel
def test_stable_argsort_is_numpys_stable_argsort(monkeypatch):
    # the radix sort's permutation against numpy's stable sort: ties (a stable sort's order is
    # unique), both zeros (equal), infinities, negatives, widths around its passes; NaN refused
    rng = np.random.default_rng(9)
    cases = [np.array([]), np.array([2.0]), np.array([-0.0, 0.0, -1.0, np.inf, -np.inf, 3.0, 0.0]),
             rng.integers(0, 4, 3000).astype(float), rng.standard_normal(5000),
             rng.random(32768) * np.exp(rng.uniform(-300.0, 0.0, 32768)),
             np.repeat(rng.random(50), 40), np.full(100, 7.0)]
    for keys in cases:
        got = numerics.stable_argsort(keys)
        assert got.dtype == np.int64
        assert np.array_equal(got, np.argsort(keys, kind="stable")), keys.size
    for kernel_on in (True, False):
        if not kernel_on:
            monkeypatch.setattr(compiled, "world_kernel", None)
        with pytest.raises(ValueError, match=r"keys\[2\] is NaN"):
            numerics.stable_argsort(np.array([1.0, 0.0, np.nan]))
