r"""Drafter log-marginals that a tree builder can rank without materialising ``(L, V)``.

A block-diffusion drafter hands the tree builder ``L`` rows of ``V`` log-probabilities.
DDTree only ever reads the top ``min(B, V)`` entries of each row (DDTree, Algorithm 1: the
per-depth top-``K`` lists), and the argmax chain only the top one. When the drafter's rows have
structure -- in a word-class world ``mu_d(b) = w[b] h_d[c(b)]`` (see
:mod:`treespec_sim.synth.drafter`) -- those entries can be found in ``O(V / m)`` per row instead
of computing all ``V`` logarithms. :class:`LazyLogMarginals` is that interface:

* :meth:`~LazyLogMarginals.top` -- the ``k`` best tokens of a row with their log-probabilities,
  in DDTree's rank order (decreasing value, ties to the smaller token id);
* :meth:`~LazyLogMarginals.values` -- log-probabilities of given tokens of a row;
* :meth:`~LazyLogMarginals.dense` / ``np.asarray(obj)`` -- the full ``(L, V)`` array, so every
  function of the contract that takes ``log_q`` as an array also takes this object.

:func:`treespec_sim.policies.ddtree` and :func:`treespec_sim.policies.chain` use the ranked
interface directly; everything else converts to the dense array. :class:`DenseLogMarginals`
wraps an array (the reference implementation; the tests check that a structured
implementation builds the same trees as its dense array).
"""

from __future__ import annotations

import math
from abc import ABC, abstractmethod

import numpy as np

from .validation import check_log_q

__all__ = ["DenseLogMarginals", "LazyLogMarginals", "kth_largest", "ranked_candidates"]


class LazyLogMarginals(ABC):
    """Per-depth drafter log-probabilities ``log q_d(a)``, ``d = 1..L``, ``a < V``, on demand.

    Subclasses implement :meth:`top`, :meth:`values` and :meth:`_dense`; rows are indexed
    ``0..L-1`` (row ``i`` is depth ``i + 1``). Entries are ``<= 0``; every row has a finite entry.
    """

    def __init__(self, depth: int, vocab_size: int) -> None:
        self._shape = (int(depth), int(vocab_size))
        self._dense_cache: np.ndarray | None = None

    @property
    def shape(self) -> tuple[int, int]:
        """``(L, V)``."""
        return self._shape

    @property
    def ndim(self) -> int:
        return 2

    @abstractmethod
    def top(self, row: int, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The ``min(k, V)`` best tokens of ``row``: ``(tokens int64, log_q float64)``.

        Order: decreasing log-probability, ties to the smaller token id -- exactly
        ``ranked_candidates(dense[row], -inf, k)`` of :mod:`treespec_sim.policies._ddtree`.
        """

    def top_all(self, k: int) -> list[tuple[np.ndarray, np.ndarray]]:
        """:meth:`top` of every row (subclasses may vectorise it across rows)."""
        return [self.top(r, k) for r in range(self._shape[0])]

    def top_block(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`top_all` as two fresh arrays, row ``d`` the list of depth ``d + 1``: tokens
        int64 ``(L, k')`` and log-probabilities float64 ``(L, k')``, ``k' = min(k, V)`` (every
        row has that many entries)."""
        tops = self.top_all(k)
        return (np.stack([t for t, _ in tops]).astype(np.int64, copy=False),
                np.stack([v for _, v in tops]).astype(np.float64, copy=False))

    @abstractmethod
    def values(self, row: int, tokens: np.ndarray) -> np.ndarray:
        """``log q_{row+1}(tokens)``: float64, same shape as ``tokens``."""

    @abstractmethod
    def _dense(self) -> np.ndarray:
        """The full float64 ``(L, V)`` array (called once; the result is cached)."""

    def dense(self) -> np.ndarray:
        """The full ``(L, V)`` log-probability array (float64, read-only, computed once)."""
        if self._dense_cache is None:
            arr = self._dense()
            arr.flags.writeable = False
            self._dense_cache = arr
        return self._dense_cache

    def row_max(self) -> np.ndarray:
        """``max_a log q_d(a)`` per row: float64 ``(L,)``."""
        return np.array([self.top(i, 1)[1][0] for i in range(self._shape[0])])

    def argmax(self) -> np.ndarray:
        """The argmax token of every row (ties to the smaller id): int64 ``(L,)``."""
        return np.array([self.top(i, 1)[0][0] for i in range(self._shape[0])], dtype=np.int64)

    def __array__(self, dtype=None, copy=None):  # the numpy array protocol
        arr = self.dense()
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if copy is False:
                raise ValueError(f"cannot convert log-marginals to {np.dtype(dtype)} without "
                                 "a copy (copy=False)")
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def _check_row(self, row: int) -> int:
        if not 0 <= int(row) < self._shape[0]:
            raise ValueError(f"row must be in [0, {self._shape[0]}); got {row!r}")
        return int(row)


class DenseLogMarginals(LazyLogMarginals):
    """:class:`LazyLogMarginals` over an explicit ``(L, V)`` array (the reference).

    Parameters
    ----------
    log_q : array_like of float, shape (L, V)
        Validated like any ``log_q`` of the contract (no NaN, no positive entry, a finite
        entry in every row, rows summing to 1 in probability); kept as float64.
    check_sums : bool, default True
        ``False`` skips the row-sum check (scores that are not a drafter's probabilities).
    """

    def __init__(self, log_q, *, check_sums: bool = True) -> None:
        lp, row_max = check_log_q(log_q, check_sums=check_sums)
        lp = np.array(lp, dtype=np.float64)
        super().__init__(*lp.shape)
        self._lp = lp
        self._row_max = row_max.astype(np.float64)

    def top(self, row: int, k: int) -> tuple[np.ndarray, np.ndarray]:

        return ranked_candidates(self._lp[self._check_row(row)], -np.inf, int(k))

    def values(self, row: int, tokens: np.ndarray) -> np.ndarray:
        return self._lp[self._check_row(row)][np.asarray(tokens, dtype=np.int64)]

    def row_max(self) -> np.ndarray:
        return self._row_max.copy()

    def _dense(self) -> np.ndarray:
        return self._lp.copy()


def ranked_candidates(row: np.ndarray, threshold: float, k: int) -> tuple[np.ndarray, np.ndarray]:
    """Tokens of ``row`` with value ``>= threshold``, best first, at most ``k`` of them.

    Order: decreasing value, ties to the smaller token id (the rank order of DDTree's top-K).

    Returns
    -------
    tokens : ndarray of int64, values : ndarray of float64
    """
    idx = np.flatnonzero(row >= threshold)
    if idx.size > k:
        vals = row[idx]
        if idx.size > 4 * k:
            # Select the top k first; ties at the boundary value keep the smallest ids.
            kth = kth_largest(vals, k)
            above = vals > kth
            n_above = int(above.sum())
            tie_ids = idx[vals == kth][: k - n_above]  # idx is sorted, so smallest ids first
            idx = np.concatenate([idx[above], tie_ids])
    vals = row[idx].astype(np.float64)
    order = np.lexsort((idx, -vals))[:k]
    return idx[order].astype(np.int64), vals[order]


def kth_largest(values: np.ndarray, k: int) -> float:
    """The ``k``-th largest entry of a 1-D array (``1 <= k <= values.size``), tie-robust.

    ``np.partition`` degrades badly (10-20x) on arrays with massive ties -- drafter rows whose
    tail sits at the junk floor ``j / V`` hold thousands of equal values. A strided sample
    proposes a threshold ``s``; ``values >= s`` usually leaves a few ``k`` entries, whose
    ``k``-th largest is the answer; if ``s`` is itself a massively tied value and fewer than
    ``k`` entries exceed it, ``s`` is the answer. Otherwise fall back to a full sort.
    """
    n = values.size
    if not 1 <= k <= n:
        raise ValueError(f"k must be in [1, {n}]; got {k}")
    if k == 1:
        return float(values.max())
    small = 8 * k + 64
    if n > small:
        stride = n // (4 * k + 256)
        if stride < 2:  # the sample would be the whole array
            return float(np.partition(values, n - k)[n - k])
        sample = values[::stride]
        # ~2x the rank the top-k would have in the sample, so that usually >= k pass.
        rank = min(sample.size, 2 * math.ceil(k / stride) + 4)
        s = np.partition(sample, sample.size - rank)[sample.size - rank]
        sub = values[values >= s]
        if sub.size >= k:
            if sub.size > small:
                above = sub[sub > s]
                if above.size < k:
                    return float(s)  # s is tied across the k-th position
                sub = above
            if sub.size <= small:
                return float(np.partition(sub, sub.size - k)[sub.size - k])
        return float(np.sort(values)[n - k])
    return float(np.partition(values, n - k)[n - k])
