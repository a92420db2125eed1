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

from ..jit import njit
from ..numerics import NORM_CUT, dot, exp_into, fixed_exp1, fixed_log1, log_into, sort_pairs

__all__ = ["LANES", "Slices", "candidates", "chain", "conditional_row", "norm_row", "rank_top",
           "shared_law", "slices", "top_classes"]


# Entries per run: top_classes and _heap_largest skip whole runs by a branch-free count or the
# run's maximum.
_RUN = 64

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
def chain(c0, g_indptr, g_indices, g_data, rows, offsets, columns, values, pi, w_cls, w_max,
          eta, beta, sums, h, norm_m, norm_z, kept, n_kept):
    """The class chain ``h_1..h_L`` into ``h`` (float64 ``(L, n)``) and, for each row with
    ``beta[d] != 1``, its normalisers :func:`norm_row` (sharpening ``beta[d]``, class sums
    ``sums[d]``) into ``norm_m[d]``, ``norm_z[d]`` and the classes it keeps into
    ``kept[d, :n_kept[d]]`` (int32 ``(L, n)``, int64 ``(L,)``; the other rows' entries are left
    as they are), each computed while its row is still in cache.

    ``h_1 = G^T e_c0 + pi[c0]`` (row ``c0`` of ``G``: ``g_*`` in CSR form); then per depth
    ``h_d = A nu + nu . pi``, and where ``eta_d != 0`` ``h_d = h_d (1 - eta_d) + eta_d``, with
    ``nu = w_cls * h_{d-1}``: each step its own rounding, in that order. ``A = G^T`` in
    :class:`Slices` form (``rows``, ``offsets``, ``columns``, ``values``); each entry of
    ``A nu`` sums its row's terms from ``0.0`` in the row's stored order, eight rows at a time;
    ``nu . pi`` is :func:`~treespec_sim.numerics.dot`.
    """
    n = pi.size
    nu = np.empty(n)
    work = np.empty((3, n))
    for c in range(n):
        h[0, c] = 0.0
    for k in range(g_indptr[c0], g_indptr[c0 + 1]):
        h[0, g_indices[k]] = g_data[k]
    for c in range(n):
        h[0, c] = h[0, c] + pi[c0]
        nu[c] = w_cls[c] * h[0, c]
    if beta[0] != 1.0:
        norm_m[0], norm_z[0], n_kept[0] = norm_row(h[0], w_max, beta[0], sums[0], kept[0],
                                                   work)
    # unsigned positions: numba then skips the negative-index check on every load
    eight = np.uint64(LANES)
    for d in range(1, h.shape[0]):
        add = dot(nu, pi)
        scale = 1.0 - eta[d]
        shift = eta[d]
        row = h[d]
        for s in range(offsets.size - 1):
            a0 = a1 = a2 = a3 = a4 = a5 = a6 = a7 = 0.0
            k = np.uint64(offsets[s])
            end = np.uint64(offsets[s + 1])
            while k < end:
                a0 += values[k] * nu[columns[k]]
                a1 += values[k + np.uint64(1)] * nu[columns[k + np.uint64(1)]]
                a2 += values[k + np.uint64(2)] * nu[columns[k + np.uint64(2)]]
                a3 += values[k + np.uint64(3)] * nu[columns[k + np.uint64(3)]]
                a4 += values[k + np.uint64(4)] * nu[columns[k + np.uint64(4)]]
                a5 += values[k + np.uint64(5)] * nu[columns[k + np.uint64(5)]]
                a6 += values[k + np.uint64(6)] * nu[columns[k + np.uint64(6)]]
                a7 += values[k + np.uint64(7)] * nu[columns[k + np.uint64(7)]]
                k += eight
            acc = (a0, a1, a2, a3, a4, a5, a6, a7)
            for lane in range(LANES):
                i = rows[s * LANES + lane]
                if i >= 0:
                    r = acc[lane] + add
                    if shift != 0.0:
                        r = r * scale
                        r = r + shift
                    row[i] = r
        for c in range(n):
            nu[c] = w_cls[c] * row[c]
        if beta[d] != 1.0:
            norm_m[d], norm_z[d], n_kept[d] = norm_row(row, w_max, beta[d], sums[d], kept[d],
                                                       work)


# A float64's bits as an int64 ``b``, mapped to ``b ^ ((b >> 63) & _NOT_SIGN)``: keys in the
# floats' order (``-0.0`` just below ``+0.0``), a NaN above ``+inf``'s key or below ``-inf``'s.
_NOT_SIGN = np.int64(0x7FFFFFFFFFFFFFFF)
_KEY_POS_INF = np.int64(0x7FF0000000000000)
_KEY_NEG_INF = np.int64(-0x7FF0000000000001)


@njit(cache=True)
def _largest(v, scratch):
    """The largest entry of float64 ``v`` (``-inf`` if empty), NaN if one is NaN: a maximum
    over the entries' integer keys, which vectorises where a float maximum does not.
    ``scratch``: float64, at least one entry, written over."""
    bits = v.view(np.int64)
    hi, lo = _KEY_NEG_INF, _KEY_POS_INF
    for c in range(v.size):
        key = bits[c] ^ ((bits[c] >> np.int64(63)) & _NOT_SIGN)
        hi = key if key > hi else hi
        lo = key if key < lo else lo
    if hi > _KEY_POS_INF or lo < _KEY_NEG_INF:
        return math.nan
    out = scratch[:1].view(np.int64)
    out[0] = hi ^ ((hi >> np.int64(63)) & _NOT_SIGN)
    return scratch[0]


@njit(cache=True)
def norm_row(h, w_max, beta, sums, kept, work):
    """``(m, Z, count)`` of one sharpened row (``ClassLogMarginals._norms``) from its class
    chain row ``h`` (float64 ``(n,)``), the class maxima of ``w``, ``beta != 1`` and the class
    sums ``S``: with ``v = h * w_max`` and ``v_max`` its largest, ``m = beta log v_max`` and
    ``Z = sum_c exp(beta log v[c] - m) S[c]`` over the classes ``v[c] >= v_max e^(-64 /
    beta)``, which go into ``kept[:count]`` in increasing order. A NaN ``v`` gives ``(NaN, 0,
    0)``, as numpy's ``max`` would. ``S`` finite; ``work``: float64 ``(3, n)`` scratch.

    ``log``/``exp`` are :func:`~treespec_sim.numerics.fixed_log1`/``fixed_exp1`` (over the kept
    classes' ``v`` at once: :func:`~treespec_sim.numerics.log_into`, ``exp_into``); the sum runs
    in eight lanes (class ``c`` to lane ``c % 8``, each in class order, combined
    ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``: :func:`~treespec_sim.numerics.dot`
    with zeros at the other classes, which leave a lane as it is): one order, every CPU's floats.
    """
    n = h.size
    v = work[0]
    for c in range(n):
        v[c] = h[c] * w_max[c]
    v_max = _largest(v, work[1])
    if v_max != v_max:
        return math.nan, 0.0, 0
    m = beta * fixed_log1(v_max)
    cut = v_max * fixed_exp1(-(NORM_CUT / beta))
    # the classes at or above the cut: a byte each, then listed eight bytes (a word) at a time,
    # a word of none skipped whole
    flags = work[2].view(np.uint8)
    for c in range(n):
        flags[c] = 1 if v[c] >= cut else 0
    words = work[2].view(np.uint64)
    count = 0
    for q in range(n // 8):
        if words[q] != 0:
            for c in range(8 * q, 8 * q + 8):     # every slot written, the kept ones counted
                kept[count] = c
                count += np.int64(flags[c])
    for c in range(8 * (n // 8), n):
        kept[count] = c
        count += np.int64(flags[c])
    every = count == n                            # then kept[j] = j: no gather
    a, b = work[1, :count], work[2, :count]
    for j in range(count):
        a[j] = v[j if every else kept[j]]
    log_into(a, b)
    for j in range(count):
        a[j] = b[j] * beta - m
    exp_into(a, b)                                # not in place: that loop would not vectorise
    if every:
        return m, dot(b, sums), count
    lanes = np.zeros(8)
    for j in range(count):
        c = kept[j]
        lanes[c & 7] += b[j] * sums[c]
    return m, ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + \
        ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7])), count


@njit(cache=True)
def _heap_largest(x, k, heap):
    """The ``k + 1`` largest of ``x`` (float64, no NaN, more than ``k`` entries) into ``heap``
    (``k + 1``), a min-heap: the first ``k + 1`` sifted up, then each later entry above the
    smallest replaces it. A run of entries none of which is above the smallest is skipped whole
    (the smallest only grows), so the heap is the one entry-by-entry replacement builds."""
    size = k + 1
    for q0 in range(size):
        v = x[q0]
        q = q0
        while q > 0 and heap[(q - 1) // 2] > v:
            heap[q] = heap[(q - 1) // 2]
            q = (q - 1) // 2
        heap[q] = v
    for lo in range(size, x.size, _RUN):
        hi = min(lo + _RUN, x.size)
        low = heap[0]
        above = 0
        for j in range(lo, hi):                   # branch-free: vectorised
            above += 1 if x[j] > low else 0
        if above == 0:
            continue
        for j in range(lo, hi):
            v = x[j]
            if v > heap[0]:                       # replace the smallest, sift down
                q = 0
                while True:
                    child = 2 * q + 1
                    if child >= size:
                        break
                    if child + 1 < size and heap[child + 1] < heap[child]:
                        child += 1
                    if heap[child] >= v:
                        break
                    heap[q] = heap[child]
                    q = child
                heap[q] = v


@njit(cache=True)
def top_classes(h, w_max, rows, k, kept, n_kept, classes, outside):
    """The ``k`` best classes of rows ``rows`` of the class chain ``h`` (float64 ``(L, n)``, ``k <
    n``) by their maxima ``v = h[r] * w_max`` (:meth:`ClassLogMarginals._class_max`'s floats).

    For row ``i`` (``r = rows[i]``): when exactly ``k`` classes reach the ``k``-th largest ``v``
    (the ``(k + 1)``-th is smaller) and no ``v`` is NaN, ``classes[i]`` gets those ``k`` classes
    in increasing order, ``outside[i]`` the ``(k + 1)``-th largest ``v``, and ``ok[i]`` is True;
    otherwise the row is left to the caller. Returns ``ok`` (bool ``(len(rows),)``).

    ``kept[r, :n_kept[r]]`` (int32 ``(L, n)``, int64 ``(L,)``): the classes :func:`norm_row`
    kept, every class at or above a cut in increasing order (none where a ``v`` is NaN). A row
    with more than ``k`` of them holds its ``k + 1`` best there, and every class at or above its
    ``k``-th best: it is read only there, unless they are a quarter of the row or more (a whole
    row reads faster than a scattered quarter of it; the classes below the cut never pass the
    ``k + 1`` best).

    The row's entries go in runs of ``_RUN``: ``t``, the ``(k + 1)``-th largest run maximum, has
    ``k + 1`` entries at or above it, so the ``k + 1`` best, and every entry at or above the
    ``k``-th best, are in the runs whose maximum reaches ``t``; only those are read again.
    """
    n = w_max.size
    ok = np.zeros(rows.size, np.bool_)
    heap = np.empty(k + 1)                        # the k + 1 largest values, a min-heap
    v = np.empty(n)                               # the row's v, by class or by kept position
    cand = np.empty(n)
    run_max = np.empty((n + _RUN - 1) // _RUN)
    for i in range(rows.size):
        r = rows[i]
        sparse = k < n_kept[r] < n // 4
        m = n_kept[r] if sparse else n
        if sparse:
            for j in range(m):
                v[j] = h[r, kept[r, j]] * w_max[kept[r, j]]
        else:
            for j in range(m):                    # vectorised
                v[j] = h[r, j] * w_max[j]
        nan = 0
        for j in range(m):                        # branch-free: vectorised
            nan += 1 if v[j] != v[j] else 0
        if nan:
            continue
        runs = (m + _RUN - 1) // _RUN
        for q in range(runs):
            top = v[q * _RUN]
            for j in range(q * _RUN + 1, min(q * _RUN + _RUN, m)):
                top = v[j] if v[j] > top else top
            run_max[q] = top
        t = -math.inf
        if runs > k + 1:
            _heap_largest(run_max[:runs], k, heap)
            t = heap[0]
        count = 0
        for q in range(runs):
            if run_max[q] >= t:
                for j in range(q * _RUN, min(q * _RUN + _RUN, m)):   # branch-free
                    cand[count] = v[j]
                    count += 1 if v[j] >= t else 0
        _heap_largest(cand[:count], k, heap)
        below = heap[0]                           # the (k + 1)-th largest
        kth = heap[1] if k == 1 else min(heap[1], heap[2])
        if not below < kth:
            continue
        w = 0
        for q in range(runs):
            if run_max[q] >= kth:
                for j in range(q * _RUN, min(q * _RUN + _RUN, m)):
                    if v[j] >= kth:
                        classes[i, w] = kept[r, j] if sparse else j
                        w += 1
        outside[i] = below
        ok[i] = True
    return ok


@njit(cache=True)
def candidates(members, h, w, rows, classes, outside, exact, toks, mu):
    """The tokens of each exact row's ``k`` best classes and their ``mu``: for the ``j``-th row
    ``i`` with ``exact[i]`` (:func:`top_classes`'s ``ok``), ``toks[j]`` the members of
    ``classes[i]`` class by class (int64 ``(n, k m)``), ``mu[j, :k m]`` their ``w[tok] *
    h[rows[i], class]`` and ``mu[j, k m]`` ``outside[i]`` (float64 ``(n, k m + 1)``)."""
    k = classes.shape[1]
    m = members.shape[1]
    j = 0
    for i in range(rows.size):
        if not exact[i]:
            continue
        r = rows[i]
        for a in range(k):
            c = classes[i, a]
            hc = h[r, c]
            for b in range(m):
                tok = members[c, b]
                toks[j, a * m + b] = tok
                mu[j, a * m + b] = w[tok] * hc
        mu[j, k * m] = outside[i]
        j += 1


@njit(cache=True)
def rank_top(toks, vals, toks_out, vals_out):
    """Per row of ``(toks, vals)`` (int64 and float64 ``(n, K)``, distinct tokens in a row), the
    ``k = toks_out.shape[1]`` best pairs by decreasing value, ties to the smaller token, into
    ``toks_out``, ``vals_out`` ``(n, k)``: a stable sort by value, then each run of equal values
    that reaches into the first ``k`` put in token order. Returns which rows it wrote (bool
    ``(n,)``): a row holding a NaN value is left out."""
    n, k = toks_out.shape
    size = vals.shape[1]
    ok = np.zeros(n, np.bool_)
    neg = np.empty(size)
    for i in range(n):
        row = vals[i]
        nan = 0
        for j in range(size):                     # branch-free: vectorised
            nan += 1 if row[j] != row[j] else 0
        if nan:
            continue
        for j in range(size):
            neg[j] = -row[j]
        order = np.argsort(neg, kind="mergesort")
        j = 0
        while j < k:
            end = j + 1
            while end < size and row[order[end]] == row[order[j]]:
                end += 1
            if end - j == 1:
                toks_out[i, j] = toks[i, order[j]]
                vals_out[i, j] = row[order[j]]
            else:
                tied = order[j:end].copy()        # into token order by the radix sort
                key = np.empty(tied.size, np.uint64)
                for q in range(tied.size):
                    key[q] = np.uint64(toks[i, tied[q]])
                sort_pairs(key, tied, np.empty_like(key), np.empty_like(tied))
                for q in range(j, min(end, k)):
                    at = tied[q - j]
                    toks_out[i, q] = toks[i, at]
                    vals_out[i, q] = row[at]
            j = end
        ok[i] = True
    return ok


@njit(cache=True)
def shared_law(h, members, log_w, beta, m, a, floor, u, c1, kept, out):
    """The correction proposal's parent-independent part at a sharpened row (``beta != 1``;
    ``BlockDiffusionDrafter._shared_law``) into ``out`` (float64 ``(V,)``): for every token
    ``b`` of class ``c``, ``e = fixed_exp(((fixed_log(h[c]) + log_w[b]) * beta) - m)`` and
    ``out[b] = (e * a + floor) + u[b] * c1`` (``u`` of size 0: no last term), each step one
    rounding in that order.

    Only the classes the norms keep (``kept``, :func:`norm_row`) are computed when that is
    exact: every other token has ``x = beta log(h_c w_b) - m < -64``, so where ``e^(x + 1) a``
    is below an eighth of ``floor``'s ulp ``e a + floor`` rounds to ``floor`` whatever ``e`` is
    (``fixed_exp`` is within 2 ulps of ``exp``) -- the same floats. ``members``: int64
    ``(n, m)``, the tokens of each class (a partition of the vocabulary).
    """
    n, per_class = members.shape
    with_u = u.size > 0
    skip = False
    if floor > 0.0 and floor < math.inf and a > 0.0 and a < math.inf and beta > 0.0:
        gap = np.nextafter(floor, math.inf) - floor
        skip = math.log(gap / (8.0 * a)) - 1.0 >= -63.0
    if skip:
        if with_u:
            for b in range(out.size):
                out[b] = floor + u[b] * c1
        else:
            out[:] = floor
    # gather the exponents, exp them in one loop (no branch: vectorised), then scatter
    n_cls = kept.size if skip else n
    toks = np.empty(n_cls * per_class, np.int64)
    x = np.empty(n_cls * per_class)
    at = 0
    for i in range(n_cls):
        c = kept[i] if skip else i
        lh = fixed_log1(h[c])
        for q in range(per_class):
            b = members[c, q]
            toks[at] = b
            x[at] = ((lh + log_w[b]) * beta) - m
            at += 1
    for i in range(x.size):
        x[i] = fixed_exp1(x[i])
    for i in range(x.size):
        b = toks[i]
        y = x[i] * a + floor
        if with_u:
            y = y + u[b] * c1
        out[b] = y


@njit(cache=True)
def conditional_row(base, c, shared, succ, corr, out):
    """``out = base * c + shared``, then ``out[succ] += corr`` (float64 ``(V,)`` arrays, int64
    ``succ`` of distinct tokens): numpy's ``np.multiply(base, c); out += shared;
    out[succ] += corr``, the same roundings in one pass."""
    for b in range(out.size):
        out[b] = base[b] * c + shared[b]
    for j in range(succ.size):
        out[succ[j]] = out[succ[j]] + corr[j]
