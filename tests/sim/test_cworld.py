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

from treespec_sim import compiled
from treespec_sim.synth import drafter as drafter_mod
from treespec_sim.synth import make_world

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


@needs_kernel
def test_sharpen_exponents_equal_numpy_steps():
    rng = np.random.default_rng(2)
    buf = np.log(rng.random((5, 777)))
    buf[2, :10] = -np.inf
    buf[4, 3] = np.nan
    beta = 1.0 + rng.random(5)
    want = buf.copy()
    m_want = beta * want.max(axis=1)
    want *= beta[:, None]
    want -= m_want[:, None]
    m = np.empty(5)
    kern.sharpen_exponents(buf, beta, m)
    assert _same(m, m_want)
    assert _same(buf, want)
