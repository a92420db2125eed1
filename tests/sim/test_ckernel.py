"""The compiled kernel (treespec_sim/ckernel.c) against the pure-numpy paths it replaces.

Every comparison runs both paths in the same process: ``compiled.kernel = None`` switches the
callers to numpy (docs/performance.md). Trees must be identical arrays; input checks must give
the same verdict and the same error message.
"""

import shutil

import numpy as np
import pytest

from proofs_check.reference import ddtree_heap_reference
from treespec_sim import compiled
from treespec_sim.marginals import DenseLogMarginals
from treespec_sim.policies import ddtree
from treespec_sim.validation import ROW_SUM_TOL_BY_DTYPE, check_log_q

kernel = compiled.kernel
needs_kernel = pytest.mark.skipif(kernel is None, reason="the compiled kernel is not built")


#: Every vector path this CPU can run (generic, AVX2, AVX-512): each is tested, not only the
#: one the CPU would pick, so a machine with fewer instructions runs tested code.
SIMD_PATHS = kernel.simd_paths() if kernel is not None else ["numpy"]


@pytest.fixture(params=SIMD_PATHS)
def simd_path(request):
    """Run the test on one of the kernel's vector paths, then restore the best one."""
    if kernel is None:
        pytest.skip("the compiled kernel is not built")
    kernel.set_simd(request.param)
    yield request.param
    kernel.set_simd(SIMD_PATHS[-1])


@pytest.fixture
def numpy_path(monkeypatch):
    """Run the block under the pure-numpy paths."""

    def run(fn, *args, **kwargs):
        with monkeypatch.context() as m:
            m.setattr(compiled, "kernel", None)
            return fn(*args, **kwargs)

    return run


def test_kernel_is_built_where_a_compiler_exists():
    # `pip install -e .` builds it (setup.py, optional=True): a machine with a C compiler that
    # runs without it has a broken install, not a slower one.
    if shutil.which("cc") or shutil.which("gcc"):
        assert kernel is not None, "a C compiler exists but treespec_sim.ckernel was not built"
        assert compiled.simd() in ("generic", "avx2", "avx512")
    else:  # pragma: no cover - machines without a compiler
        assert compiled.simd() in ("numpy", "generic", "avx2", "avx512")


def _log_softmax(x):
    return x - np.logaddexp.reduce(x, axis=1, keepdims=True)


def _rows(rng, L, V, kind):
    if kind == "sharp":
        return _log_softmax(rng.standard_normal((L, V)) * 12)
    if kind == "flat":
        return _log_softmax(rng.standard_normal((L, V)) * 0.3)
    if kind == "ties":  # few distinct values: exact ties everywhere, within and across rows
        return _log_softmax(rng.integers(0, 4, size=(L, V)).astype(float))
    if kind == "neginf":
        x = rng.standard_normal((L, V)) * 3
        x[rng.random((L, V)) < 0.3] = -np.inf
        x[:, 0] = 0.0
        return _log_softmax(x)
    if kind == "positive":  # log-softmax rounding above 0 (accepted and clamped)
        x = rng.standard_normal((L, V)) * 3
        x[:, 0] = 80.0  # p ~ 1 - 1e-30: its log-prob rounds to 0; put it just above
        lp = _log_softmax(x)
        lp[:, 0] = 5e-13
        return lp
    raise ValueError(kind)


@needs_kernel
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_sums_are_within_the_margin_of_exact_sums(dtype, simd_path):
    rng = np.random.default_rng(1)
    worst = 0.0
    for V in (1, 3, 17, 64, 1000, 32768, 32771):
        for scale in (0.1, 1.0, 5.0, 40.0):
            x = _log_softmax(rng.standard_normal((6, V)) * scale)
            x[:, ::3] -= rng.uniform(0, 120, size=x[:, ::3].shape)  # tails far below -87
            if V > 4:
                x[0, 1] = -np.inf
            lp = x.astype(dtype)
            _, mx, sums, nan_row = kernel.scan(lp, True, 1e-3, 2e-5, 1e-12)
            exact = np.exp(lp.astype(np.float64)).sum(axis=1)
            assert nan_row == -1
            np.testing.assert_array_equal(np.frombuffer(mx), lp.max(axis=1).astype(np.float64))
            err = np.abs(np.frombuffer(sums) - exact) / (exact + 1e-30 / compiled.ROW_SUM_MARGIN)
            worst = max(worst, float(err.max()))
    # the bound the verdict relies on, with room to spare (measured: ~1e-6 float64, 1e-7 float32)
    assert worst < compiled.ROW_SUM_MARGIN / 3


@needs_kernel
def test_scan_reports_the_first_nan_row(simd_path):
    lp = np.full((4, 100), -np.log(100.0))
    lp[2, 57] = np.nan
    lp[3, 99] = np.nan
    assert kernel.scan(lp, True, 1e-3, 2e-5, 1e-12)[3] == 2
    assert kernel.scan(lp.astype(np.float32), False, 1e-3, 2e-5, 1e-12)[3] == 2


def _outcome(fn, *args, **kwargs):
    try:
        out = fn(*args, **kwargs)
    except ValueError as exc:
        return "error", str(exc)
    return "ok", out


def _bad_inputs():
    rng = np.random.default_rng(2)
    good = _log_softmax(rng.standard_normal((5, 300)))
    cases = {"good": good}
    for name, value in (("nan", np.nan), ("posinf", np.inf), ("positive", 1e-6),
                        ("tiny_positive", 1e-13)):
        x = good.copy()
        x[3, 17] = value
        cases[name] = x
    dead = good.copy()
    dead[1] = -np.inf
    cases["dead_row"] = dead
    cases["logits"] = rng.standard_normal((5, 300))
    tol = ROW_SUM_TOL_BY_DTYPE["float64"]
    for name, mass in (("inside_margin_pass", 1 + tol - 2e-6),
                       ("inside_margin_fail", 1 + tol + 2e-6),
                       ("clear_pass", 1 + tol / 2), ("clear_fail", 1 - 2 * tol)):
        x = good.copy()
        x[4] += np.log(mass)  # row 4 now sums to `mass`
        cases[name] = x
    return cases


@needs_kernel
@pytest.mark.parametrize("name", sorted(_bad_inputs()))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_check_log_q_gives_numpys_verdict_and_message(name, dtype, numpy_path, simd_path):
    lp = _bad_inputs()[name].astype(dtype)
    for clamp in (True, False):
        fast = _outcome(check_log_q, lp, clamp=clamp)
        slow = numpy_path(_outcome, check_log_q, lp, clamp=clamp)
        assert fast[0] == slow[0], (name, fast, slow)
        if fast[0] == "error":
            assert fast[1] == slow[1]
        else:
            np.testing.assert_array_equal(fast[1][0], slow[1][0])
            np.testing.assert_array_equal(fast[1][1], slow[1][1])
        # the tree builder's one-pass check: same verdict, same message
        fast_tree = _outcome(ddtree, lp, 9)
        slow_tree = numpy_path(_outcome, ddtree, lp, 9)
        assert fast_tree[0] == slow_tree[0] and (fast_tree[0] == "ok"
                                                 or fast_tree[1] == slow_tree[1])


def test_inputs_inside_the_margin_are_decided_by_numpy(monkeypatch):
    # A row summing to within ROW_SUM_MARGIN of the tolerance is not decided by the kernel's
    # approximate sum: check_log_q must reach the numpy path for it.
    calls = []
    original = np.exp

    def spy(*a, **k):
        calls.append(1)
        return original(*a, **k)

    x = _bad_inputs()["inside_margin_pass"]
    monkeypatch.setattr(np, "exp", spy)
    check_log_q(x)
    assert calls, "a row within the kernel's margin was passed without numpy's sum"


@needs_kernel
@pytest.mark.parametrize("kind", ["sharp", "flat", "ties", "neginf", "positive"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_trees_equal_the_numpy_builder(kind, dtype, numpy_path, simd_path):
    rng = np.random.default_rng(hash((kind, dtype)) % 2**32)
    for L, V in ((1, 1), (1, 50), (2, 3), (4, 17), (6, 100), (15, 1000), (15, 5000), (3, 32768)):
        lp = _rows(rng, L, V, kind).astype(dtype)
        for budget in (1, 2, 7, 64, 300, 1024):
            got = ddtree(lp, budget)
            want = numpy_path(ddtree, lp, budget)
            assert np.array_equal(got.parent, want.parent), (L, V, budget)
            assert np.array_equal(got.token, want.token), (L, V, budget)
            assert np.array_equal(got.depth, want.depth), (L, V, budget)


@needs_kernel
def test_trees_equal_the_reference_heap_on_ties():
    rng = np.random.default_rng(5)
    for _ in range(20):
        lp = _rows(rng, int(rng.integers(1, 6)), int(rng.integers(2, 40)), "ties")
        budget = int(rng.integers(1, 80))
        tree = ddtree(lp, budget)
        parent, token, depth, _ = ddtree_heap_reference(lp, budget)
        assert tree.parent.tolist() == parent
        assert tree.token[1:].tolist() == token[1:]
        assert tree.depth.tolist() == depth


@needs_kernel
def test_ranked_path_and_strided_input_give_the_same_tree(numpy_path):
    rng = np.random.default_rng(6)
    lp = _rows(rng, 12, 6000, "sharp")
    lazy = DenseLogMarginals(lp)
    strided = np.asfortranarray(lp)  # not C-contiguous: the general path
    for budget in (5, 64, 700):
        want = numpy_path(ddtree, lp, budget)
        for got in (ddtree(lazy, budget), ddtree(strided, budget),
                    numpy_path(ddtree, lazy, budget)):
            assert np.array_equal(got.parent, want.parent)
            assert np.array_equal(got.token, want.token)


@needs_kernel
def test_torch_input_takes_the_kernel_path_and_gives_the_same_tree(numpy_path):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    lp = _rows(rng, 8, 2000, "flat").astype(np.float32)
    got = ddtree(torch.from_numpy(lp), 64, root_token=3)
    want = numpy_path(ddtree, lp, 64, root_token=3)
    assert np.array_equal(got.parent, want.parent)
    assert np.array_equal(got.token, want.token)
    assert got.token[0] == 3


@needs_kernel
def test_kernel_refuses_bad_buffers():
    with pytest.raises(ValueError, match="not a vector path"):
        kernel.set_simd("sse9")
    with pytest.raises(ValueError, match="float32 or float64"):
        kernel.scan(np.zeros((2, 3), dtype=np.int64), True, 1e-3, 2e-5, 1e-12)
    with pytest.raises(ValueError, match="2-dimensional"):
        kernel.scan(np.zeros(3), True, 1e-3, 2e-5, 1e-12)
    with pytest.raises(ValueError, match="budget must be >= 1"):
        kernel.ddtree_dense(np.zeros((2, 3)), 0, True, 1e-3, 2e-5, 1e-12)
    with pytest.raises(ValueError, match="offsets"):
        kernel.ranked_tree(np.zeros(3), np.zeros(3, dtype=np.int64),
                           np.array([0, 2, 1], dtype=np.int64), 2)


@needs_kernel
def test_ancestor_mask_equals_the_level_by_level_mask():
    from treespec_sim.tree import ancestor_mask

    rng = np.random.default_rng(8)
    for budget in (1, 5, 64, 1024):
        lp = _rows(rng, 15, 3000, "flat")
        tree = ddtree(lp, budget)
        want = ancestor_mask(tree.parent, tree.levels)
        for fill in (False, True):  # every entry is written, whatever the array held
            got = np.full((tree.n_nodes, tree.n_nodes), fill, dtype=bool)
            kernel.ancestor_mask(tree.parent, got)
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(tree.attention_mask(), want)
    with pytest.raises(ValueError, match="precede"):
        kernel.ancestor_mask(np.array([-1, 2, 0], dtype=np.int64), np.zeros((3, 3), dtype=bool))


def _kernel_nodes(lp, budget, enum_cap=-1):
    nodes = kernel.ddtree_dense(lp, budget, False, 0.0, 0.0, np.inf, -1, enum_cap)[1]
    return np.frombuffer(nodes, dtype=np.int64).reshape(3, -1)


def _dflash(rng, L, V, top, bottom):
    """Log-marginals whose sharpness falls with depth, as benchmarks/bench_ddtree.py's."""
    return _log_softmax(rng.standard_normal((L, V)) * np.linspace(top, bottom, L)[:, None])


def _node_scores(lp, parent, token, depth):
    score = np.zeros(parent.size)
    for v in range(1, parent.size):
        score[v] = score[parent[v]] + min(float(lp[depth[v] - 1, token[v]]), 0.0)
    return score


@needs_kernel
@pytest.mark.parametrize("kind", ["dflash_sharp", "dflash_flat", "ties", "close", "neginf"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_enumerated_and_popped_trees_are_the_numpy_tree(kind, dtype, numpy_path, simd_path):
    # With a certified bound t the kernel enumerates every node scoring >= t and sorts them by
    # the heap's key; past enum_cap such nodes (default 4B + 64), or without a bound, the heap
    # pops the tree. Both are the numpy tree, node for node; the bound is below the B-th score.
    # "close": values 1e-9 apart, which share their high 32 bits (the sorts' second stage)
    rng = np.random.default_rng(hash((kind, dtype)) % 2**32)
    enumerated = popped = 0
    for L, V in ((15, 32768), (6, 5000), (3, 40)):
        if kind.startswith("dflash"):
            lp = _dflash(rng, L, V, *((12.0, 3.0) if kind == "dflash_sharp" else (2.0, 0.3)))
        elif kind == "close":
            lp = _log_softmax(rng.integers(0, 3, size=(L, V)) + rng.uniform(0, 1e-9, (L, V)))
        else:
            lp = _rows(rng, L, V, kind)
        lp = lp.astype(dtype)
        for budget in (1, 64, 1024):
            want = numpy_path(ddtree, lp, budget)
            for cap in (-1, 0, budget):  # default; always the heap; cut short, then the heap
                parent, token, depth = _kernel_nodes(lp, budget, cap)
                facts = kernel.last_build()
                assert np.array_equal(parent, want.parent), (L, V, budget, cap)
                assert np.array_equal(token[1:], want.token[1:]), (L, V, budget, cap)
                assert np.array_equal(depth, want.depth), (L, V, budget, cap)
                assert facts["heap"] or cap != 0
                enumerated += not facts["heap"]
                popped += facts["heap"]
                if parent.size == budget + 1:  # B nodes: the B-th scores >= t
                    assert facts["t"] <= _node_scores(lp, parent, token, depth)[-1]
    assert enumerated and popped


@needs_kernel
def test_the_certified_bound_is_close_to_the_bth_score():
    # every path over the kept entries is counted (histograms, bins of 1/8 and 1/16): on
    # DFlash-like marginals t ends within ~1 of the B-th best score (single deviations alone
    # left it ~5 below on sharp rows), so that rows keep few entries
    rng = np.random.default_rng(12)
    for top, bottom in ((12.0, 3.0), (8.0, 0.7), (2.0, 0.3)):
        lp = _dflash(rng, 15, 32768, top, bottom)
        parent, token, depth = _kernel_nodes(lp, 1024)
        t, bth = kernel.last_build()["t"], _node_scores(lp, parent, token, depth)[-1]
        assert bth - 1.0 <= t <= bth, (top, t, bth)


@needs_kernel
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rows_cut_above_the_final_bound_are_read_again(dtype, numpy_path, simd_path):
    # flat rows at B = 1024: row 0 keeps ~2 k0 entries above a sampled guess, but the tree
    # takes ~K of its tokens, so the row is read again for every entry >= t - P_0
    rng = np.random.default_rng(11)
    lp = _dflash(rng, 15, 32768, 2.0, 0.3).astype(dtype)
    got = ddtree(lp, 1024)
    assert kernel.last_build()["rereads"] >= 1
    want = numpy_path(ddtree, lp, 1024)
    assert np.array_equal(got.parent, want.parent)
    assert np.array_equal(got.token, want.token)


def test_cpu_description_reads_the_first_processors_family_and_model(monkeypatch):
    text = ("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
            "model name\t: AMD EPYC\n\nprocessor\t: 1\ncpu family\t: 26\nmodel\t\t: 2\n")
    monkeypatch.setattr(compiled, "_cpuinfo", lambda: compiled._first_processor(text))
    assert compiled.cpu_name() == "AMD EPYC"
    assert compiled.cpu_description() == "AMD EPYC (family 25, model 17)"
    monkeypatch.setattr(compiled, "_cpuinfo", dict)       # no /proc/cpuinfo: platform's name
    assert compiled.cpu_description() == compiled.cpu_name() != ""
