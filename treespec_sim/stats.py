r"""The one statistics convention of treespec: intervals, paired ratios, throughput.

Every interval treespec reports is one of three kinds, always at 95% unless asked otherwise:

**Mean over independent units** (:func:`mean_ci`)
    A t-interval (Student, ``k - 1`` degrees of freedom) over the *units of independence*: fresh
    contexts (each round its own unit), decoded sequences (rounds within a sequence share their
    context: the unit is the sequence, and the mean is the ratio estimator
    :math:`\sum_s \sum_r x_{sr} / \sum_s n_s` with the batch-means variance), or worlds. A
    single value is a batch of size one.

**Ratio of paired sums** (:func:`paired_bootstrap`)
    Throughput :math:`\sum \tau / \sum D` and relative gains ``a / b`` of methods run on the same
    units: percentile bootstrap, resampling units (with every column of a unit together, so the
    pairing is kept), 2000 replicates from a seeded generator.

**Throughput** (:func:`throughput`)
    The renewal-reward ratio :math:`\sum_r \tau_r / \sum_r D_r` (tokens per second), never the
    mean of per-round ratios.

**Counts against a known law** (:func:`gof_test`, :func:`tv_interval`, :func:`gof_power`)
    A sampler's outcomes (a verifier's emitted tokens) tested against an exact law (the
    target's). The test is Pearson's chi-square with the cells of expected count below
    :data:`MIN_EXPECTED` pooled into one; its p-value is the chi-square law's (asymptotic); an
    outcome the law gives probability 0 has p-value 0. Several tests share a family-wise
    false-alarm rate by Bonferroni. The size of a departure is the total-variation distance
    :math:`\mathrm{TV}(\hat\pi, p)` of the empirical law from the known one, with the
    non-asymptotic interval :math:`\mathrm{TV}(\hat\pi, p) \pm e`,
    :math:`e = \tfrac12\sqrt{(V - 1)/n} + \sqrt{\ln(1/(1 - \text{level}))/(2n)}` (the
    expectation bound on :math:`\mathrm{TV}(\hat\pi, \pi)` plus McDiarmid's deviation; valid
    at every ``n``, conservative), clipped to ``[0, 1]``. The power of the test against every
    departure of total variation at least :math:`\delta` is at least that of the noncentral
    chi-square with noncentrality :math:`4 n \delta^2` (Cauchy-Schwarz:
    :math:`\sum_y d_y^2/p_y \ge (\sum_y |d_y|)^2`), the least detectable departure moving
    mass in proportion between two halves of ``p``.

Pooled and between-world intervals
----------------------------------
A synthetic regime is a *law* over worlds (:func:`treespec_sim.synth.make_world` with a seed),
and the sweep runs several worlds per regime. Two intervals answer two questions:

*pooled* (:func:`mean_ci` or :func:`paired_bootstrap` over every context of every world)
    how precisely these particular worlds' mean is known; it ignores that another draw of
    worlds would give other numbers, so it is too narrow for a statement about the regime;
*between-world* (:func:`world_ci`)
    the t-interval over the per-world means (one unit per world, ``k - 1`` degrees of freedom):
    the regime's mean over worlds, honest about world-to-world variation and wide with few
    worlds (with 3 worlds the t quantile is 4.30). Relative comparisons use the same interval
    over per-world ratios or differences (:func:`world_columns`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .validation import Interval, check_param

__all__ = ["LEVEL", "MIN_EXPECTED", "N_BOOT", "GofTest", "MeanCI", "batch_mean_ci", "gof_power",
           "gof_test", "mean_ci", "paired_bootstrap", "percentile_ci", "pooled_gof", "ratio_ci",
           "t_quantile", "throughput", "tv_interval", "world_ci", "world_columns"]

#: Confidence level of every interval treespec reports.
LEVEL = 0.95
#: Bootstrap replicates.
N_BOOT = 2000
#: Cells of a chi-square test with a smaller expected count are pooled into one.
MIN_EXPECTED = 5.0


@dataclass(frozen=True)
class MeanCI:
    """A mean with a two-sided confidence interval (``nan`` bounds with fewer than 2 units)."""

    mean: float
    low: float
    high: float

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def has_interval(self) -> bool:
        """Whether the bounds are numbers (a single unit has none)."""
        return math.isfinite(self.low) and math.isfinite(self.high)

    def text(self, digits: int = 3, *, unit: str = "unit") -> str:
        """``"2.606 [2.571, 2.641]"``, or ``"2.606 (one unit: no interval)"`` where the bounds
        are ``nan`` -- never ``[nan, nan]``."""
        if self.has_interval:
            return f"{self.mean:.{digits}f} [{self.low:.{digits}f}, {self.high:.{digits}f}]"
        return f"{self.mean:.{digits}f} (one {unit}: no interval)"

    def to_dict(self) -> dict[str, float | None]:
        """``{"mean", "ci_low", "ci_high"}``, the bounds ``None`` where there is no interval."""
        return {"mean": self.mean, "ci_low": self.low if self.has_interval else None,
                "ci_high": self.high if self.has_interval else None}


def t_quantile(dof: int, *, level: float = LEVEL) -> float:
    """The two-sided ``level`` quantile of Student's t with ``dof`` degrees of freedom (the
    half-width of a t-interval in standard errors: 4.30 for 2 dof at 95%)."""
    check_param(dof, "dof", Interval("int", 1, numpy=False))
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    return _t_quantile(level, dof)


def _t_quantile(level: float, dof: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.5 + level / 2, dof))


def mean_ci(units: np.ndarray | Sequence[np.ndarray], *, level: float = LEVEL) -> MeanCI:
    """Mean and t-interval over independent units.

    Parameters
    ----------
    units : array (k,) or sequence of arrays
        One value per unit, or one array of values per unit (a decoded sequence's rounds):
        the mean is then over all values, the interval from the batch-means variance of the
        ratio estimator around it.
    level : float
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    if isinstance(units, np.ndarray) and units.ndim == 1:
        batches = [units[i: i + 1] for i in range(units.size)]
    else:
        batches = [np.atleast_1d(np.asarray(b, dtype=np.float64)) for b in units]
    if not batches or any(b.size == 0 for b in batches):
        raise ValueError("units must be non-empty, with at least one value per unit")
    sizes = np.array([b.size for b in batches], dtype=np.float64)
    sums = np.array([b.sum() for b in batches])
    return batch_mean_ci(sums, sizes, level=level)


def batch_mean_ci(sums: np.ndarray | Sequence[float], sizes: np.ndarray | Sequence[float], *,
                  level: float = LEVEL) -> MeanCI:
    r""":func:`mean_ci` from each unit's sum and size: the ratio estimator
    :math:`\sum_s x_s / \sum_s n_s` with its batch-means t-interval over the ``k`` units.

    For units known only by their totals (a log that keeps per request the rounds and the
    tokens they committed, or a histogram of them), without the values themselves.

    Parameters
    ----------
    sums : array (k,)
        Each unit's sum of values.
    sizes : array (k,)
        Each unit's number of values (or any positive weight); finite, ``> 0``.
    level : float

    Returns
    -------
    MeanCI
        ``nan`` bounds with a single unit.
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    sums = np.asarray(sums, dtype=np.float64)
    sizes = np.asarray(sizes, dtype=np.float64)
    if sums.ndim != 1 or sums.shape != sizes.shape or sums.size == 0:
        raise ValueError(f"sums and sizes must be non-empty 1-D arrays of one length; got "
                         f"shapes {sums.shape} and {sizes.shape}")
    if not (np.all(np.isfinite(sizes)) and np.all(sizes > 0)):
        raise ValueError("sizes must be finite and positive")
    mean = float(sums.sum() / sizes.sum())
    k = sums.size
    if k < 2:
        return MeanCI(mean, math.nan, math.nan)
    resid = sums - mean * sizes
    se = math.sqrt(float((resid ** 2).sum()) / (k - 1) / k) / sizes.mean()
    half = _t_quantile(level, k - 1) * se
    return MeanCI(mean, mean - half, mean + half)


def world_ci(world_means: np.ndarray | Sequence[float], *, level: float = LEVEL) -> MeanCI:
    """Between-world interval: :func:`mean_ci` with each world one unit of one value.

    Parameters
    ----------
    world_means : array (k,)
        One value per world (a mean over that world's contexts, or a per-world ratio or
        difference of such means); finite.
    level : float

    Returns
    -------
    MeanCI
        The unweighted mean of the ``k`` values (the pooled mean when the worlds hold equally
        many contexts) and its t-interval with ``k - 1`` degrees of freedom; ``nan`` bounds
        for a single world.
    """
    means = np.asarray(world_means, dtype=np.float64)
    if means.ndim != 1 or means.size == 0:
        raise ValueError(f"world_means must be a non-empty 1-D sequence; got shape "
                         f"{means.shape}")
    if not np.all(np.isfinite(means)):
        raise ValueError(f"world_means must be finite; got {means.tolist()}")
    return mean_ci(means, level=level)


def world_columns(world_means: np.ndarray | Sequence[float], *, prefix: str = "tau",
                  level: float = LEVEL) -> dict[str, object]:
    """The between-world columns of a sweep row (one naming for every family).

    ``{prefix}_world_means`` (list of the per-world values), ``{prefix}_world_ci_low`` and
    ``{prefix}_world_ci_high`` (:func:`world_ci`); ``prefix`` is ``"tau"`` for E[tau] and
    ``"rel"`` for a ratio to the row's baseline.
    """
    ci = world_ci(world_means, level=level)
    return {f"{prefix}_world_means": [float(x) for x in np.asarray(world_means, dtype=float)],
            f"{prefix}_world_ci_low": ci.low, f"{prefix}_world_ci_high": ci.high}


def paired_bootstrap(numer: np.ndarray, denom: np.ndarray | None = None, *,
                     units: np.ndarray | None = None, rng: np.random.Generator,
                     n_boot: int = N_BOOT) -> np.ndarray:
    """Bootstrap replicates of ``sum(numer) / sum(denom)`` per column, resampling units.

    Parameters
    ----------
    numer, denom : array (n, m)
        Per-round values of ``m`` paired columns (methods on the same rounds); ``denom``
        defaults to ones (the ratio is then a mean).
    units : array (n,), optional
        The unit each round belongs to (a decoded sequence); default: every round its own.
    rng : numpy.random.Generator

    Returns
    -------
    ndarray (n_boot, m)
        :func:`percentile_ci` of a column for an interval, :func:`ratio_ci` of two columns for
        a paired ratio of ratios.
    """
    numer = np.asarray(numer, dtype=np.float64)
    if numer.ndim == 1:
        numer = numer[:, None]
    denom = np.ones_like(numer) if denom is None else np.asarray(denom, dtype=np.float64)
    if denom.ndim == 1:
        denom = denom[:, None]
    if numer.shape != denom.shape:
        raise ValueError(f"numer and denom must have the same shape; got {numer.shape} and "
                         f"{denom.shape}")
    if units is None:
        units = np.arange(numer.shape[0])
    ids, inv = np.unique(units, return_inverse=True)
    num = np.zeros((ids.size, numer.shape[1]))
    den = np.zeros((ids.size, numer.shape[1]))
    np.add.at(num, inv, numer)
    np.add.at(den, inv, denom)
    draws = rng.integers(0, ids.size, size=(n_boot, ids.size))
    return num[draws].sum(axis=1) / den[draws].sum(axis=1)


def percentile_ci(replicates: np.ndarray, *, level: float = LEVEL) -> tuple[float, float]:
    """The ``level`` percentile interval of bootstrap replicates (1-D), e.g. a column of
    :func:`paired_bootstrap`'s output."""
    # 2.5 and 97.5 exactly at level 0.95 (100 (1 - level) / 2 is 2.5000000000000027)
    tail = round(50.0 * (1.0 - level), 12)
    lo, hi = np.percentile(np.asarray(replicates, dtype=np.float64), [tail, 100.0 - tail])
    return float(lo), float(hi)


def ratio_ci(boot: np.ndarray, j: int, base: int, point: np.ndarray, *, level: float = LEVEL
             ) -> tuple[float, float, float]:
    """Column ``j`` against column ``base`` of :func:`paired_bootstrap` replicates ``(n_boot,
    m)``: ``(point[j] / point[base], low, high)``, the interval that of the paired ratio
    ``boot[:, j] / boot[:, base]``."""
    lo, hi = percentile_ci(boot[:, j] / boot[:, base], level=level)
    return float(point[j] / point[base]), lo, hi


def throughput(tokens: np.ndarray, seconds: np.ndarray) -> float:
    r"""Tokens per second :math:`\sum \tau / \sum D` over rounds."""
    tokens = np.asarray(tokens, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    total = float(seconds.sum())
    if not total > 0:
        raise ValueError("seconds must sum to a positive time")
    return float(tokens.sum() / total)


# ----------------------------------------------------------------- counts against a known law
@dataclass(frozen=True)
class GofTest:
    """A chi-square goodness-of-fit test: the statistic, its degrees of freedom, the p-value."""

    statistic: float
    df: int
    p_value: float


def gof_test(counts, probs) -> GofTest:
    """Pearson's chi-square of ``counts`` against the exact law ``probs``.

    Parameters
    ----------
    counts : array (K,)
        Observed count of each outcome (non-negative integers).
    probs : array (K,)
        The known law (non-negative, summing to 1 within 1e-9).

    Returns
    -------
    GofTest
        Cells of expected count below :data:`MIN_EXPECTED` are pooled into one cell (merged into
        the smallest other cell if the pool is still below it); ``df`` = cells - 1. A count in a
        cell of probability 0 gives statistic ``inf`` and p-value 0; fewer than two cells, or
        no counts, give p-value 1 (nothing to test).
    """
    from scipy import stats

    obs = np.asarray(counts, dtype=np.float64).ravel()
    p = np.asarray(probs, dtype=np.float64).ravel()
    if obs.shape != p.shape or obs.size == 0:
        raise ValueError(f"counts and probs must be non-empty and of one shape; got {obs.shape} "
                         f"and {p.shape}")
    if (obs < 0).any() or not np.all(np.isfinite(obs)):
        raise ValueError("counts must be finite and non-negative")
    if (p < 0).any() or not np.all(np.isfinite(p)) or abs(p.sum() - 1.0) > 1e-9:
        raise ValueError(f"probs must be a distribution; sums to {p.sum()!r}")
    n = obs.sum()
    if n <= 0:
        return GofTest(0.0, 0, 1.0)
    if (obs[p == 0] > 0).any():
        return GofTest(math.inf, max(int(np.count_nonzero(p > 0)) - 1, 1), 0.0)
    exp = n * p
    big = exp >= MIN_EXPECTED
    o, e = list(obs[big]), list(exp[big])
    pool_o, pool_e = float(obs[~big].sum()), float(exp[~big].sum())
    if pool_e > 0:
        if pool_e >= MIN_EXPECTED or not e:
            o.append(pool_o)
            e.append(pool_e)
        else:
            j = int(np.argmin(e))
            o[j] += pool_o
            e[j] += pool_e
    if len(e) < 2:
        return GofTest(0.0, 0, 1.0)
    o_arr, e_arr = np.array(o), np.array(e)
    stat = float(((o_arr - e_arr) ** 2 / e_arr).sum())
    df = len(e) - 1
    return GofTest(stat, df, float(stats.chi2.sf(stat, df)))


def pooled_gof(tests) -> GofTest:
    """Independent chi-square tests as one: the statistics and degrees of freedom add (a
    departure present in every test accumulates; one confined to one test is diluted)."""
    from scipy import stats

    tests = list(tests)
    if not tests:
        raise ValueError("pooled_gof needs at least one test")
    stat = float(sum(t.statistic for t in tests))
    df = int(sum(t.df for t in tests))
    if df == 0:
        return GofTest(0.0, 0, 1.0)
    return GofTest(stat, df, 0.0 if math.isinf(stat) else float(stats.chi2.sf(stat, df)))


def tv_interval(counts, probs, *, level: float = LEVEL) -> tuple[float, float, float]:
    r"""``(tv, low, high)``: the total-variation distance of the empirical law of ``counts``
    from ``probs`` and its non-asymptotic ``level`` interval for the sampler's true distance.

    With :math:`n` draws from an unknown :math:`\pi` over :math:`V` outcomes,
    :math:`|\mathrm{TV}(\hat\pi, p) - \mathrm{TV}(\pi, p)| \le \mathrm{TV}(\hat\pi, \pi)`,
    whose mean is at most :math:`\tfrac12\sqrt{(V-1)/n}` and which exceeds its mean by
    :math:`t` with probability at most :math:`e^{-2nt^2}` (bounded differences ``1/n``). So
    :math:`[\mathrm{TV} - e, \mathrm{TV} + e]`, :math:`e = \tfrac12\sqrt{(V-1)/n} +
    \sqrt{\ln(1/(1-\text{level}))/(2n)}`, holds the true distance with probability at least
    ``level`` at every ``n`` (conservative). Clipped to ``[0, 1]``.
    """
    obs = np.asarray(counts, dtype=np.float64).ravel()
    p = np.asarray(probs, dtype=np.float64).ravel()
    if obs.shape != p.shape or obs.size == 0:
        raise ValueError(f"counts and probs must be non-empty and of one shape; got {obs.shape} "
                         f"and {p.shape}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1); got {level!r}")
    n = float(obs.sum())
    if n <= 0:
        raise ValueError("tv_interval needs at least one count")
    tv = 0.5 * float(np.abs(obs / n - p).sum())
    half = 0.5 * math.sqrt((obs.size - 1) / n) + math.sqrt(math.log(1.0 / (1.0 - level))
                                                           / (2.0 * n))
    return tv, max(0.0, tv - half), min(1.0, tv + half)


def gof_power(n: float, tv: float, df: int, alpha: float) -> float:
    r"""The least power of :func:`gof_test` at size ``alpha`` against any departure of total
    variation at least ``tv``, with ``n`` draws (noncentral chi-square, noncentrality
    :math:`4 n\,\mathrm{tv}^2`; asymptotic, as the test's own p-value)."""
    from scipy import stats

    if df < 1:
        return 0.0
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1); got {alpha!r}")
    crit = stats.chi2.isf(alpha, df)
    return float(stats.ncx2.sf(crit, df, 4.0 * n * tv * tv))
