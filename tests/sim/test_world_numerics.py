"""The synthetic drafter's numerics against independent references: the normalisers against
numpy's log / exp over every class, the radix sort against numpy's stable sort, the rows' best
classes against a full sort."""

import numpy as np
import pytest

from treespec_sim import numerics
from treespec_sim.numerics import fixed_exp1, fixed_log1
from treespec_sim.synth.class_kernels import _largest, norm_row, rank_top, top_classes


def test_norms_leave_out_only_terms_below_the_cut():
    # a row where most classes sit far below the largest: the sum over the classes within
    # e^-64 (the definition) against numpy's log / exp over every class
    rng = np.random.default_rng(6)
    n = 4096
    v = np.exp(rng.uniform(-400.0, 0.0, n))
    v[17] = 1.0
    sums = 1.0 + 3.0 * rng.random(n)
    for beta in (0.5, 1.3, 3.0):
        classes = np.empty(n, np.int32)
        m, z, count = norm_row(v, np.ones(n), beta, sums, classes, np.empty((3, n)))
        x = beta * np.log(v)
        assert m == pytest.approx(x.max(), abs=1e-13)
        full = np.exp(x - x.max()) @ sums
        assert z == pytest.approx(full, rel=1e-14)
        kept = v >= v.max() * fixed_exp1(-64.0 / beta)
        np.testing.assert_array_equal(classes[:count], np.flatnonzero(kept))
        assert 0 < kept.sum() < n // 2            # the cut leaves most of this row out
        left_out = np.exp(x[~kept] - x.max()) @ sums[~kept]
        assert left_out < 1e-23 * z


def test_largest_is_numpys_max_and_nan_of_either_sign_is_nan():
    rng = np.random.default_rng(4)
    cases = [rng.standard_normal(1000), rng.random(8192) * np.exp(rng.uniform(-700, 0, 8192)),
             -rng.random(33), np.array([-np.inf, -1e308]), np.array([np.inf, 3.0]),
             np.array([5e-324, 0.0]), np.array([-0.0, -1.0]), np.full(9, -np.inf)]
    for v in cases:
        assert _largest(v, np.empty(1)) == v.max()
    assert _largest(np.empty(0), np.empty(1)) == -np.inf
    for sign in (1.0, -1.0):
        for at in (0, 500, 999):
            v = rng.standard_normal(1000)
            v[at] = np.copysign(np.nan, sign)
            assert np.isnan(_largest(v, np.empty(1)))


def test_a_nan_in_a_row_gives_no_norms():
    rng = np.random.default_rng(8)
    h = rng.random(100)
    h[37] = np.nan
    kept = np.full(100, -1, np.int32)
    m, z, count = norm_row(h, np.ones(100), 2.0, np.ones(100), kept, np.empty((3, 100)))
    assert np.isnan(m) and z == 0.0 and count == 0


def _top_reference(v, k):
    """``(ok, classes, below)`` of one row's class values ``v`` by a full sort."""
    if np.isnan(v).any():
        return False, None, None
    order = np.sort(v)[::-1]
    kth, below = order[k - 1], order[k]
    if not below < kth:
        return False, None, None
    return True, np.flatnonzero(v >= kth), below


@pytest.mark.parametrize("n", [100, 8192])
def test_top_classes_are_the_rows_k_best_by_a_full_sort(n):
    # rows read whole, read only at their kept classes (few or most of them), with ties at
    # the k-th value, a NaN, and a row whose best classes sit in one run
    rng = np.random.default_rng(3)
    w_max = rng.uniform(0.5, 2.0, n)
    L = 8
    h = rng.exponential(size=(L, n)) ** 3
    tied = rng.choice(n, 40, replace=False)
    w_max[tied] = 1.0
    h[2] = rng.random(n)
    h[2, tied] = 9.0                                             # 40 equal v above the rest
    h[3, 5] = np.nan
    h[4, 64:96] += 50.0                                          # the best in one run
    v = h * w_max
    rows = np.arange(L, dtype=np.int64)
    for k in (1, 3, 16, 70):
        if k >= n:
            continue
        kept = np.zeros((L, n), np.int32)
        n_kept = np.zeros(L, np.int64)
        for r in range(L):
            vr = np.where(np.isnan(v[r]), -np.inf, v[r])
            cut = np.sort(vr)[::-1][[k + 5, n // 10, n // 2, k - 1][r % 4]]
            got = np.flatnonzero(vr >= cut) if not np.isnan(v[r]).any() else np.empty(0, int)
            kept[r, :got.size], n_kept[r] = got, got.size
        classes = np.full((L, k), -1, np.int64)
        outside = np.full(L, np.nan)
        ok = top_classes(h, w_max, rows, k, kept, n_kept, classes, outside)
        for r in range(L):
            want_ok, want_classes, want_below = _top_reference(v[r], k)
            assert ok[r] == want_ok, (k, r)
            if want_ok:
                np.testing.assert_array_equal(classes[r], want_classes)
                assert outside[r] == want_below
        assert ok.sum() >= L // 2
        assert ok[2] == (k >= 40) and not ok[3]                  # the tie and the NaN


def test_rank_top_orders_by_value_then_token_as_lexsort():
    # rows with few distinct values (long runs of ties, as at the junk floor), a run that
    # crosses the k-th place, both zeros, -inf, and a NaN row left out
    rng = np.random.default_rng(11)
    n, size = 12, 300
    toks = np.stack([rng.permutation(5000)[:size] for _ in range(n)]).astype(np.int64)
    vals = -rng.integers(0, 6, (n, size)).astype(float)
    vals[1] = -rng.random(size)                                  # no ties
    vals[2, :40] = -0.0
    vals[3, ::3] = -np.inf
    vals[4, 7] = np.nan
    for k in (1, 5, 64, size):
        t_out, v_out = np.full((n, k), -7, np.int64), np.full((n, k), 9.0)
        ok = rank_top(toks, vals, t_out, v_out)
        assert ok.tolist() == [r != 4 for r in range(n)]
        for r in range(n):
            if r == 4:
                continue
            want = np.lexsort((toks[r], -vals[r]))[:k]
            np.testing.assert_array_equal(t_out[r], toks[r, want])
            np.testing.assert_array_equal(v_out[r], vals[r, want])


def test_stable_argsort_is_numpys_stable_argsort():
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
    with pytest.raises(ValueError, match=r"keys\[2\] is NaN"):
        numerics.stable_argsort(np.array([1.0, 0.0, np.nan]))


def test_norms_sum_in_eight_lanes_in_class_order():
    # the order that makes Z the same float on every CPU, spelled out in Python
    rng = np.random.default_rng(3)
    for n in (1, 7, 8, 9, 63, 4099):
        h = rng.random(n) * np.exp(rng.uniform(-40, 0, n))
        w_max = rng.random(n)
        sums = 1.0 + rng.random(n)
        for beta in (0.7, 2.0):
            v = (h * w_max).tolist()
            m = beta * fixed_log1(max(v))
            cut = max(v) * fixed_exp1(-(64.0 / beta))
            lanes = [0.0] * 8
            for c, x in enumerate(v):
                if x >= cut:
                    lanes[c % 8] += fixed_exp1(fixed_log1(x) * beta - m) * float(sums[c])
            want = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + \
                ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
            assert norm_row(h, w_max, beta, sums, np.empty(n, np.int32),
                            np.empty((3, n)))[:2] == (m, want)

