"""The DDTree builder's one pass over a raw array (treespec_sim/policies/_dense.py) and the input
check's row masses (treespec_sim/rowmass.py), against independent references: DDTree's heap
(proofs_check.reference), numpy's exact float64 sums, and the ancestor relation walked edge by
edge.
"""

import numpy as np
import pytest

from proofs_check.reference import ddtree_heap_reference
from treespec_sim.marginals import DenseLogMarginals
from treespec_sim.policies import ddtree
from treespec_sim.policies._dense import dense_tree
from treespec_sim.rowmass import MASS_ERROR, _exp_terms, row_masses
from treespec_sim.tree import ancestor_mask
from treespec_sim.validation import ROW_SUM_TOL_BY_DTYPE, check_log_q


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


def _dflash(rng, L, V, top, bottom):
    """Log-marginals whose sharpness falls with depth, as benchmarks/bench_ddtree.py's."""
    return _log_softmax(rng.standard_normal((L, V)) * np.linspace(top, bottom, L)[:, None])


def _assert_heap_tree(parent, token, depth, lp, budget, what=None):
    """The reference heap's tree on the clamped array, node for node (root token aside)."""
    want = ddtree_heap_reference(np.minimum(np.asarray(lp, dtype=np.float64), 0.0), budget)
    assert list(parent) == want[0], what
    assert list(token[1:]) == want[1][1:], what
    assert list(depth) == want[2], what


def _node_scores(lp, parent, token, depth):
    score = np.zeros(parent.size)
    for v in range(1, parent.size):
        score[v] = score[parent[v]] + min(float(lp[depth[v] - 1, token[v]]), 0.0)
    return score


def _dense(lp, budget, enum_cap=-1):
    nodes, _, info = dense_tree(np.ascontiguousarray(lp), budget, -1.0, enum_cap)
    return nodes, {"rereads": int(info[0]), "heap": bool(info[1]), "t": float(info[2])}


# ---------------------------------------------------------------------------- row masses
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_masses_are_within_their_stated_error_of_exact_sums(dtype):
    rng = np.random.default_rng(1)
    worst = 0.0
    for V in (1, 3, 17, 64, 1000, 2048, 2049, 32768, 32771):
        for scale in (0.1, 1.0, 5.0, 40.0):
            x = _log_softmax(rng.standard_normal((6, V)) * scale)
            x[:, ::3] -= rng.uniform(0, 120, size=x[:, ::3].shape)  # tails far below -87
            if V > 4:
                x[0, 1] = -np.inf
            lp = x.astype(dtype)
            exact = np.exp(lp.astype(np.float64)).sum(axis=1)
            err = np.abs(row_masses(lp) - exact) / (exact + 1e-30 / MASS_ERROR)
            worst = max(worst, float(err.max()))
    # the bound the verdict relies on, with room to spare
    assert worst < MASS_ERROR / 3


def test_float32_exp_terms_are_within_their_stated_error_over_the_float32_range():
    # every 251st float32 from -0.0 down to -87 (the module's bound was measured on all of them)
    lo = int(np.array([-0.0], np.float32).view(np.uint32)[0])
    hi = int(np.array([-87.0], np.float32).view(np.uint32)[0])
    x = np.arange(lo, hi + 1, 251, dtype=np.uint32).view(np.float32)
    x = np.concatenate([x, np.float32([-87.0, -86.99999, -1e-30, -0.34657359, 0.34657359])])
    terms = np.empty(x.size, np.float32)
    _exp_terms(x, terms)
    err = np.abs(terms.astype(np.float64) / np.exp(x.astype(np.float64)) - 1.0)
    assert err.max() < 4.6e-7


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_row_masses_propagate_nan_of_either_sign_and_positive_infinity(dtype):
    lp = np.full((5, 3000), -np.log(3000.0), dtype=dtype)
    lp[1, 2500] = np.nan
    lp[2, 7] = -np.nan  # sign bit set: below -inf in the builder's order keys
    lp[3, 2999] = np.inf
    assert np.signbit(lp[2, 7])
    assert np.isnan(row_masses(lp)).tolist() == [False, True, True, True, False]


# ---------------------------------------------------------------------------- the check
def _outcome(fn, *args, **kwargs):
    try:
        out = fn(*args, **kwargs)
    except ValueError as exc:
        return "error", str(exc)
    return "ok", out


def _bad_inputs():
    """name -> (array, the verdict a definition of the check gives: ok or a message part)."""
    rng = np.random.default_rng(2)
    good = _log_softmax(rng.standard_normal((5, 300)))
    cases = {"good": (good, None)}
    for name, value, want in (("nan", np.nan, "log_q[3, 17]"), ("posinf", np.inf, "log_q[3, 17]"),
                              ("positive", 1e-6, "positive log-probability"),
                              ("tiny_positive", 1e-13, "log_q[3] sums to")):
        x = good.copy()
        x[3, 17] = value
        cases[name] = (x, want)
    dead = good.copy()
    dead[1] = -np.inf
    cases["dead_row"] = (dead, "log_q[1] has no finite entry")
    cases["logits"] = (rng.standard_normal((5, 300)), "positive log-probability")
    tol = ROW_SUM_TOL_BY_DTYPE["float64"]
    for name, mass, want in (("inside_margin_pass", 1 + tol - 2e-6, None),
                             ("inside_margin_fail", 1 + tol + 2e-6, "log_q[4] sums to"),
                             ("clear_pass", 1 + tol / 2, None),
                             ("clear_fail", 1 - 2 * tol, "log_q[4] sums to")):
        x = good.copy()
        x[4] += np.log(mass)  # row 4 now sums to `mass`
        cases[name] = (x, want)
    return cases


@pytest.mark.parametrize("name", sorted(_bad_inputs()))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_check_log_q_and_the_builders_pass_give_the_defined_verdict(name, dtype):
    x, want = _bad_inputs()[name]
    lp = x.astype(dtype)
    if dtype == "float32" and name.startswith("inside_margin"):
        want = None if name.endswith("pass") else want
        tol = ROW_SUM_TOL_BY_DTYPE["float32"]  # float32's tolerance is wider: both pass
        if abs(float(np.exp(lp[4].astype(np.float64)).sum()) - 1) <= tol:
            want = None
    for clamp in (True, False):
        got = _outcome(check_log_q, lp, clamp=clamp)
        if want is None:
            assert got[0] == "ok", (name, got)
            np.testing.assert_array_equal(got[1][1], np.minimum(lp.max(axis=1), 0.0))
        else:
            assert got[0] == "error" and want in got[1], (name, got)
    # the tree builder's one-pass check: the same verdict and message as check_log_q on the
    # unclamped array (the builder clamps only the values it reads)
    tree = _outcome(ddtree, lp, 9)
    check = _outcome(check_log_q, lp, clamp=False)
    assert tree[0] == check[0] and (tree[0] == "ok" or tree[1] == check[1]), (tree, check)


def _deep_bad_rows():
    """name -> a DFlash-like (15, 32768) array with one defect in a row the tree never reaches
    (B = 8: a shallow tree), where the builder keeps no entry of the row."""
    base = _dflash(np.random.default_rng(13), 15, 32768, 12.0, 3.0)
    cases = {}
    for name, value in (("nan", np.nan), ("negative_nan", -np.nan), ("posinf", np.inf),
                        ("positive", 1e-6), ("tiny_positive", 5e-13)):
        x = base.copy()
        x[14, 20001] = value
        cases[name] = x
    x = base.copy()
    x[14] = -np.inf
    cases["dead_row"] = x
    x = base.copy()
    x[14, 7] = -1e300  # finite in float64, -inf in float32
    cases["below_float32"] = x
    return cases


@pytest.mark.parametrize("name", sorted(_deep_bad_rows()))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("check_sums", [True, False])
def test_the_builders_flags_find_defects_in_rows_it_keeps_nothing_of(name, dtype, check_sums):
    # the builder flags a row from its float32 maximum and its mass, and only a flagged row is
    # checked exactly: a defect where no entry is kept must still give check_log_q's verdict
    lp = _deep_bad_rows()[name].astype(dtype)
    tree = _outcome(ddtree, lp, 8, check_sums=check_sums)
    check = _outcome(check_log_q, lp, check_sums=check_sums, clamp=False)
    assert tree[0] == check[0] and (tree[0] == "ok" or tree[1] == check[1]), (tree, check)
    if tree[0] == "ok":
        _assert_heap_tree(tree[1].parent, tree[1].token, tree[1].depth, lp, 8)


def test_rows_within_the_mass_error_of_the_tolerance_are_decided_by_numpy(monkeypatch):
    calls = []
    original = np.exp

    def spy(*a, **k):
        calls.append(1)
        return original(*a, **k)

    x = _bad_inputs()["inside_margin_pass"][0]
    monkeypatch.setattr(np, "exp", spy)
    check_log_q(x)
    assert calls, "a row within the mass error of the tolerance was passed without numpy's sum"


# ---------------------------------------------------------------------------- the tree
@pytest.mark.parametrize("kind", ["sharp", "flat", "ties", "neginf", "positive"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_trees_equal_the_reference_heap(kind, dtype):
    rng = np.random.default_rng(abs(hash((kind, dtype))) % 2**32)
    for L, V in ((1, 1), (1, 50), (2, 3), (4, 17), (6, 100), (15, 1000), (3, 32768)):
        lp = _rows(rng, L, V, kind).astype(dtype)
        for budget in (1, 2, 7, 64, 300):
            got = ddtree(lp, budget)
            _assert_heap_tree(got.parent, got.token, got.depth, lp, budget, (L, V, budget))


def test_trees_equal_the_reference_heap_on_small_tie_inputs():
    rng = np.random.default_rng(5)
    for _ in range(20):
        lp = _rows(rng, int(rng.integers(1, 6)), int(rng.integers(2, 40)), "ties")
        budget = int(rng.integers(1, 80))
        tree = ddtree(lp, budget)
        _assert_heap_tree(tree.parent, tree.token, tree.depth, lp, budget)


def test_ranked_strided_and_dense_inputs_give_the_same_tree():
    rng = np.random.default_rng(6)
    lp = _rows(rng, 12, 6000, "sharp")
    lazy = DenseLogMarginals(lp)
    strided = np.asfortranarray(lp)
    for budget in (5, 64, 700):
        want = ddtree(lp, budget)
        for got in (ddtree(lazy, budget), ddtree(strided, budget)):
            assert np.array_equal(got.parent, want.parent)
            assert np.array_equal(got.token, want.token)


def test_torch_input_gives_the_arrays_tree():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(7)
    lp = _rows(rng, 8, 2000, "flat").astype(np.float32)
    got = ddtree(torch.from_numpy(lp), 64, root_token=3)
    want = ddtree(lp, 64, root_token=3)
    assert np.array_equal(got.parent, want.parent)
    assert np.array_equal(got.token, want.token)
    assert got.token[0] == 3


@pytest.mark.parametrize("kind", ["dflash_sharp", "dflash_flat", "ties", "close", "neginf"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_enumerated_and_popped_trees_are_the_heaps_tree(kind, dtype):
    # With a certified bound t the builder enumerates every node scoring >= t and sorts them by
    # the heap's key; past enum_cap such nodes (default 4B + 64), or without a bound, the heap
    # pops the tree. Both are the reference heap's tree; the bound is below the B-th score.
    # "close": values 1e-9 apart, which share their high 32 bits (the sorts' second stage)
    rng = np.random.default_rng(abs(hash((kind, dtype))) % 2**32)
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
            trees = []
            for cap in (-1, 0, budget):  # default; always the heap; cut short, then the heap
                (parent, token, depth), facts = _dense(lp, budget, cap)
                trees.append((parent, token, depth))
                assert facts["heap"] or cap != 0
                enumerated += not facts["heap"]
                popped += facts["heap"]
                if parent.size == budget + 1:  # B nodes: the B-th scores >= t
                    assert facts["t"] <= _node_scores(lp, parent, token, depth)[-1]
            for other in trees[1:]:
                assert all(np.array_equal(a, b) for a, b in zip(trees[0], other, strict=True))
            _assert_heap_tree(*trees[0], lp, budget, (L, V, budget))
    assert enumerated and popped


def test_the_certified_bound_is_close_to_the_bth_score():
    # every path over the kept entries is counted (histograms, bins of 1/8 and 1/16): on
    # DFlash-like marginals t ends within ~1 of the B-th best score, so that rows keep few
    # entries
    rng = np.random.default_rng(12)
    for top, bottom in ((12.0, 3.0), (8.0, 0.7), (2.0, 0.3)):
        lp = _dflash(rng, 15, 32768, top, bottom)
        (parent, token, depth), facts = _dense(lp, 1024)
        bth = _node_scores(lp, parent, token, depth)[-1]
        assert bth - 1.0 <= facts["t"] <= bth, (top, facts["t"], bth)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rows_cut_above_the_final_bound_are_read_again(dtype):
    # one sure token at depth 1, then flat rows at B = 1024: row 1 keeps ~2 k0 entries above a
    # sampled guess, but the tree takes ~K of its tokens under that token, so the row is read
    # again for every entry >= t - P_1 (row 0 keeps its top K from the start)
    rng = np.random.default_rng(11)
    lp = _dflash(rng, 15, 32768, 2.0, 0.3)
    lp[0] = -60.0
    lp[0, 5] = 0.0
    lp = _log_softmax(lp).astype(dtype)
    nodes, facts = _dense(lp, 1024)
    assert facts["rereads"] >= 1
    assert np.count_nonzero(nodes[2] == 2) > 1000
    _assert_heap_tree(*nodes, lp, 1024)


@pytest.mark.parametrize("budget", [64, 1024])
def test_a_tree_drawn_from_the_first_row_reads_it_once(budget):
    # flat rows: the tree takes ~B tokens of row 0, which keeps its top K from the first read
    rng = np.random.default_rng(11)
    lp = _dflash(rng, 15, 32768, 2.0, 0.3)
    nodes, facts = _dense(lp, budget)
    assert np.count_nonzero(nodes[2] == 1) > 0.9 * budget
    assert facts["rereads"] == 0
    _assert_heap_tree(*nodes, lp, budget)


# ---------------------------------------------------------------------------- the mask
def test_ancestor_mask_is_the_ancestor_relation():
    rng = np.random.default_rng(8)
    for budget in (1, 5, 64, 300):
        tree = ddtree(_rows(rng, 15, 3000, "flat"), budget)
        n = tree.n_nodes
        want = np.zeros((n, n), dtype=bool)
        for i in range(n):  # walk each node's path to the root
            j = i
            while j >= 0:
                want[i, j] = True
                j = int(tree.parent[j])
        for fill in (False, True):  # every entry is written, whatever the array held
            got = np.full((n, n), fill, dtype=bool)
            ancestor_mask(tree.parent, got)
            np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(tree.attention_mask(), want)

