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

__all__ = ["LEVEL", "N_BOOT", "MeanCI", "batch_mean_ci", "mean_ci", "paired_bootstrap",
           "percentile_ci", "ratio_ci", "t_quantile", "throughput", "world_ci", "world_columns"]

#: Confidence level of every interval treespec reports.
LEVEL = 0.95
#: Bootstrap replicates.
N_BOOT = 2000


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
    if isinstance(dof, bool) or not isinstance(dof, int) or dof < 1:
        raise ValueError(f"dof must be an integer >= 1; got {dof!r}")
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
