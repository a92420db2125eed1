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
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

__all__ = ["LEVEL", "N_BOOT", "MeanCI", "mean_ci", "paired_bootstrap", "throughput"]

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
    values = np.concatenate(batches)
    mean = float(values.mean())
    k = len(batches)
    if k < 2:
        return MeanCI(mean, math.nan, math.nan)
    sizes = np.array([b.size for b in batches], dtype=np.float64)
    sums = np.array([b.sum() for b in batches])
    resid = sums - mean * sizes
    se = math.sqrt(float((resid ** 2).sum()) / (k - 1) / k) / sizes.mean()
    half = _t_quantile(level, k - 1) * se
    return MeanCI(mean, mean - half, mean + half)


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
        Take ``np.percentile(..., [2.5, 97.5], axis=0)`` for an interval, or divide two columns
        of it for a paired ratio of ratios.
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


def throughput(tokens: np.ndarray, seconds: np.ndarray) -> float:
    r"""Tokens per second :math:`\sum \tau / \sum D` over rounds."""
    tokens = np.asarray(tokens, dtype=np.float64)
    seconds = np.asarray(seconds, dtype=np.float64)
    total = float(seconds.sum())
    if not total > 0:
        raise ValueError("seconds must sum to a positive time")
    return float(tokens.sum() / total)
