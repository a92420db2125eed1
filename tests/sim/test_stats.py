"""treespec_sim.stats: the one interval convention (t-intervals, percentile bootstrap, ratios)."""

import numpy as np
import pytest

from treespec_sim.stats import LEVEL, mean_ci, paired_bootstrap, percentile_ci, ratio_ci


def test_percentile_ci_is_the_two_sided_95_percent_interval():
    x = np.random.default_rng(0).standard_normal(1001)
    assert LEVEL == 0.95
    # exactly numpy's 2.5th and 97.5th percentiles (no rounding drift from 100 (1 - level) / 2)
    assert percentile_ci(x) == tuple(np.percentile(x, [2.5, 97.5]))
    lo, hi = percentile_ci(x, level=0.5)
    assert (lo, hi) == tuple(np.percentile(x, [25.0, 75.0]))


def test_paired_bootstrap_detects_a_shift_and_its_absence():
    a = np.linspace(1, 2, 20)
    boot = paired_bootstrap(np.column_stack([a, a + 0.5]), rng=np.random.default_rng(0))
    lo, hi = percentile_ci(boot[:, 1] - boot[:, 0])
    assert lo == pytest.approx(0.5) and hi == pytest.approx(0.5)
    noisy = a + np.r_[np.ones(10), -np.ones(10)]
    boot = paired_bootstrap(np.column_stack([a, noisy]), rng=np.random.default_rng(0))
    lo, hi = percentile_ci(boot[:, 1] - boot[:, 0])
    assert lo < 0 < hi


def test_ratio_ci_pairs_the_columns():
    rng = np.random.default_rng(1)
    tokens = rng.random((200, 2)) + 1.0
    tokens[:, 1] = tokens[:, 0] * 1.1            # column 1 is exactly 10% above column 0
    seconds = np.ones_like(tokens)
    boot = paired_bootstrap(tokens, seconds, rng=rng)
    point = tokens.sum(axis=0) / seconds.sum(axis=0)
    r, lo, hi = ratio_ci(boot, 1, 0, point)
    assert r == pytest.approx(1.1) and lo == pytest.approx(1.1) and hi == pytest.approx(1.1)
    lo0, hi0 = percentile_ci(boot[:, 0])
    assert hi0 - lo0 > 100 * (hi - lo)          # each column varies; their paired ratio does not


def test_mean_ci_is_the_t_interval():
    ci = mean_ci(np.r_[1.0, 2.0, 3.0])
    # mean 2, s.e. 1/sqrt(3), t quantile with 2 degrees of freedom 4.303
    assert ci.mean == 2.0
    assert ci.high - 2.0 == pytest.approx(4.302653 / np.sqrt(3), rel=1e-5)
    assert 2.0 - ci.low == pytest.approx(ci.high - 2.0)
