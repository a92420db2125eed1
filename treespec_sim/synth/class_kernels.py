"""The word-class drafter's loops over the ``V / m`` classes, compiled by numba: the chain's
sparse product (in sliced form), the sharpened rows' normalisers and the rows' top lists
(:mod:`treespec_sim.synth.drafter`).

Each loop states its order of additions, so its floats are the same on every CPU (numba keeps a
loop's order and contracts no multiply-add without ``fastmath``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
from numba import njit

from ..numerics import NORM_CUT, fixed_exp1, fixed_log1

__all__ = ["LANES", "Slices", "chain_step", "class_norms", "norm_row", "rank_top", "slices",
           "top_classes"]


#: Rows per slice of :class:`Slices`: eight independent sums in flight, so that a row's chain of
#: dependent additions does not set the pace.
LANES = 8


@dataclass(frozen=True)
class Slices:
    """A CSR matrix's rows in slices of :data:`LANES` (sliced ELLPACK): rows sorted by decreasing
    length, each slice's rows side by side term by term and padded with ``0.0`` terms to its
    longest row.

    A padded term adds ``0.0 * x[0]``: exact for the non-negative finite sums it is used for.
    """

    rows: np.ndarray     # int64 (S * LANES,): the row in each slot, -1 for a padding slot
    offsets: np.ndarray  # int64 (S + 1,): slice s's terms are terms[offsets[s]:offsets[s + 1]]
    columns: np.ndarray  # uint16 (or int32 past 65536 columns) (nnz + padding,), slot-interleaved
    values: np.ndarray   # float64, the same layout


def slices(indptr: np.ndarray, indices: np.ndarray, data: np.ndarray, n_cols: int) -> Slices:
    """:class:`Slices` of the CSR matrix ``(indptr, indices, data)`` with ``n_cols`` columns; each
    row's terms keep their stored order."""
    n = indptr.size - 1
    lengths = np.diff(indptr).astype(np.int64)
    order = np.argsort(-lengths, kind="stable")
    n_slices = -(-n // LANES)
    rows = np.full(n_slices * LANES, -1, dtype=np.int64)
    rows[:n] = order
    padded = np.zeros(n_slices * LANES, dtype=np.int64)
    padded[:n] = lengths[order]
    widths = padded.reshape(n_slices, LANES).max(axis=1) if n else np.zeros(0, np.int64)
    offsets = np.zeros(n_slices + 1, dtype=np.int64)
    np.cumsum(widths * LANES, out=offsets[1:])
    columns = np.zeros(int(offsets[-1]), dtype=np.uint16 if n_cols <= 65536 else np.int32)
    values = np.zeros(int(offsets[-1]))
    _fill_slices(np.asarray(indptr, np.int64), np.asarray(indices, np.int64),
                 np.asarray(data, np.float64), rows, offsets, columns, values)
    return Slices(rows=rows, offsets=offsets, columns=columns, values=values)


@njit(cache=True)
def _fill_slices(indptr, indices, data, rows, offsets, columns, values):
    for s in range(offsets.size - 1):
        for lane in range(LANES):
            i = rows[s * LANES + lane]
            if i < 0:
                continue
            at = offsets[s] + lane
            for k in range(indptr[i], indptr[i + 1]):
                columns[at] = indices[k]
                values[at] = data[k]
                at += LANES


@njit(cache=True)
def chain_step(rows, offsets, columns, values, nu, add, scale, shift, has_eta, w_cls, h, nu_out):
    """One depth of the class chain: ``h = A nu + add``, then (``has_eta``) ``h = h * scale +
    shift``, and ``nu_out = w_cls * h``, each step its own rounding in that order.

    ``A`` in :class:`Slices` form (its four arrays); ``nu``, ``w_cls``, ``h``, ``nu_out``:
    float64 ``(n,)``. Each entry of ``A nu`` sums its row's terms from ``0.0`` in the row's
    stored order (for rows sorted by column, scipy's ``A @ nu``), eight rows at a time.
    """
    for s in range(offsets.size - 1):
        a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
        for k in range(offsets[s], offsets[s + 1], LANES):
            a0 += values[k] * nu[columns[k]]
            a1 += values[k + 1] * nu[columns[k + 1]]
            a2 += values[k + 2] * nu[columns[k + 2]]
            a3 += values[k + 3] * nu[columns[k + 3]]
            a4 += values[k + 4] * nu[columns[k + 4]]
            a5 += values[k + 5] * nu[columns[k + 5]]
            a6 += values[k + 6] * nu[columns[k + 6]]
            a7 += values[k + 7] * nu[columns[k + 7]]
        sums = (a0, a1, a2, a3, a4, a5, a6, a7)
        for lane in range(LANES):
            i = rows[s * LANES + lane]
            if i >= 0:
                r = sums[lane] + add
                if has_eta:
                    r = r * scale
                    r = r + shift
                h[i] = r
                nu_out[i] = w_cls[i] * r


@njit(cache=True)
def norm_row(h, w_max, beta, sums):
    """``(m, Z)`` of one sharpened row (``ClassLogMarginals._norms``) from its class chain row
    ``h`` (float64 ``(n,)``), the class maxima of ``w``, ``beta != 1`` and the class sums
    ``S``: with ``v = h * w_max``, ``m = beta log max v`` and
    ``Z = sum_c exp(beta log v[c] - m) S[c]`` over the classes ``v[c] >= max v e^(-64 / beta)``.

    ``log``/``exp`` are :func:`~treespec_sim.numerics.fixed_log1`/``fixed_exp1``; the sum runs
    in eight lanes (class ``c`` to lane ``c % 8``, each in class order, combined
    ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``): one order, every CPU's floats.
    """
    n = h.size
    v_max = -math.inf
    nan = False
    for c in range(n):
        v = h[c] * w_max[c]
        if v != v:
            nan = True
        elif v > v_max:
            v_max = v
    if nan:                                       # as numpy's max: m NaN, no class kept
        return math.nan, 0.0
    m = beta * fixed_log1(v_max)
    cut = v_max * fixed_exp1(-(NORM_CUT / beta))
    lanes = np.zeros(8)
    for c in range(n):
        v = h[c] * w_max[c]
        if v >= cut:
            lanes[c % 8] += fixed_exp1(fixed_log1(v) * beta - m) * sums[c]
    z = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5])
                                                           + (lanes[6] + lanes[7]))
    return m, z


@njit(cache=True)
def class_norms(h, w_max, beta, sums, m_out, z_out):
    """:func:`norm_row` of every row ``d`` of ``h`` (float64 ``(L, n)``) with ``beta[d] != 1``
    into ``m_out[d]``, ``z_out[d]`` (the others are left as they are)."""
    for d in range(h.shape[0]):
        if beta[d] != 1.0:
            m_out[d], z_out[d] = norm_row(h[d], w_max, beta[d], sums[d])


@njit(cache=True)
def top_classes(h, w_max, rows, k, classes, outside):
    """The ``k`` best classes of rows ``rows`` of the class chain ``h`` (float64 ``(L, n)``, ``k <
    n``) by their maxima ``v = h[r] * w_max`` (:meth:`ClassLogMarginals._class_max`'s floats).

    For row ``i`` (``r = rows[i]``): when exactly ``k`` classes reach the ``k``-th largest ``v``
    (the ``(k + 1)``-th is smaller) and no ``v`` is NaN, ``classes[i]`` gets those ``k`` classes
    in increasing order, ``outside[i]`` the ``(k + 1)``-th largest ``v``, and ``ok[i]`` is True;
    otherwise the row is left to the caller. Returns ``ok`` (bool ``(len(rows),)``).
    """
    n = w_max.size
    ok = np.zeros(rows.size, np.bool_)
    heap = np.empty(k + 1)                  # the k + 1 largest values so far, a min-heap
    for i in range(rows.size):
        r = rows[i]
        size = 0
        nan = False
        for c in range(n):
            x = h[r, c] * w_max[c]
            if x != x:
                nan = True
                break
            if size <= k:                   # sift up
                j = size
                size += 1
                while j > 0 and heap[(j - 1) // 2] > x:
                    heap[j] = heap[(j - 1) // 2]
                    j = (j - 1) // 2
                heap[j] = x
            elif x > heap[0]:               # replace the smallest, sift down
                j = 0
                while True:
                    child = 2 * j + 1
                    if child >= size:
                        break
                    if child + 1 < size and heap[child + 1] < heap[child]:
                        child += 1
                    if heap[child] >= x:
                        break
                    heap[j] = heap[child]
                    j = child
                heap[j] = x
        if nan:
            continue
        below = heap[0]                     # the (k + 1)-th largest
        kth = heap[1] if size == 2 else min(heap[1], heap[2])
        if not below < kth:
            continue
        j = 0
        for c in range(n):
            if h[r, c] * w_max[c] >= kth:
                classes[i, j] = c
                j += 1
        outside[i] = below
        ok[i] = True
    return ok


@njit(cache=True)
def rank_top(toks, vals, toks_out, vals_out):
    """Per row of ``(toks, vals)`` (int64 and float64 ``(n, K)``, distinct tokens in a row), the
    ``k = toks_out.shape[1]`` best pairs by decreasing value, ties to the smaller token, into
    ``toks_out``, ``vals_out`` ``(n, k)``: a stable sort by token, then a stable sort by value.
    Returns which rows it wrote (bool ``(n,)``): a row holding a NaN value is left out."""
    n, k = toks_out.shape
    ok = np.zeros(n, np.bool_)
    for i in range(n):
        row = vals[i]
        nan = False
        for x in row:
            if x != x:
                nan = True
        if nan:
            continue
        by_tok = np.argsort(toks[i], kind="mergesort")
        neg = np.empty(row.size)
        for j in range(row.size):
            neg[j] = -row[by_tok[j]]
        by_val = np.argsort(neg, kind="mergesort")
        for j in range(k):
            at = by_tok[by_val[j]]
            toks_out[i, j] = toks[i, at]
            vals_out[i, j] = row[at]
        ok[i] = True
    return ok
