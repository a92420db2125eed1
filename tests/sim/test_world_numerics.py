"""The synthetic drafter's numerics against independent references: the normalisers against
numpy's log / exp over every class, the radix sort against numpy's stable sort."""

import numpy as np
import pytest

from treespec_sim import numerics
from treespec_sim.numerics import fixed_exp1, fixed_log1
from treespec_sim.synth.class_kernels import norm_row


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
        m, z, count = norm_row(v, np.ones(n), beta, sums, v.max(), classes, np.empty((3, n)))
        x = beta * np.log(v)
        assert m == pytest.approx(x.max(), abs=1e-13)
        full = np.exp(x - x.max()) @ sums
        assert z == pytest.approx(full, rel=1e-14)
        kept = v >= v.max() * fixed_exp1(-64.0 / beta)
        np.testing.assert_array_equal(classes[:count], np.flatnonzero(kept))
        assert 0 < kept.sum() < n // 2            # the cut leaves most of this row out
        left_out = np.exp(x[~kept] - x.max()) @ sums[~kept]
        assert left_out < 1e-23 * z


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
            assert norm_row(h, w_max, beta, sums, max(v), np.empty(n, np.int32),
                            np.empty((3, n)))[:2] == (m, want)

