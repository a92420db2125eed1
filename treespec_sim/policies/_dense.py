r"""DDTree's nodes from a raw ``(L, V)`` array in one pass over it, compiled by numba.

:func:`dense_tree` is what :func:`treespec_sim.policies.ddtree` runs on an array; :func:`best_first`
is DDTree's heap over per-depth ranked lists, what it runs on lazy marginals. Both return the
reference heap's nodes in its pop order (``tests/sim/test_ddtree.py`` holds them to the
brute-force and heap references).

**Which entries a row keeps.** A token ``a`` at depth ``d`` can be in the tree only if (i) it
ranks among the top ``K = min(B, V)`` of its row (otherwise ``K`` siblings precede it under any
parent), and (ii) ``P_d + x_{d,a} >= t``, where ``P_d`` is the best score of a depth-``d``
parent (the sum of the row maxima above ``d``) and ``t`` is any certified lower bound on the
``B``-th best score. ``t`` is certified by counting ``B`` distinct nodes scoring ``>= t`` among
every path over the entries kept so far (:func:`_certify_row`: loss histograms convolved depth
by depth). Before any ``t``, a row keeps entries above a guess from a sample of itself
(:func:`_sample_threshold`), at most ``k0 = 2 ceil(B / L) + 16`` of them (the buffer's
compaction raises its threshold), ``K`` in the first row (its nodes have no parent to
limit them). A row whose list was cut above its final threshold ``t - P_d`` is read again,
and ``t`` is certified again after it; a list that holds its row's top ``K`` is never read
again, however it was cut: by (i) it is complete for the tree.

**The tree.** With a certified ``t``, every node scoring ``>= t`` is enumerated depth first,
children by rank, and sorted stably by score; the first ``B`` are the tree. Depth-first
enumeration with children by rank visits nodes in rank-tuple order, so a stable sort by score
gives the heap's key order ``(-score, rank tuple)``, ties included: node ``i`` is the ``i``-th
pop of DDTree's heap (each pop pushes its next sibling and its first child, whose keys are
larger, so pops come in increasing key order). Without a bound, or past ``4B + 64`` such nodes,
the heap pops instead (:func:`best_first`; ``enum_cap = 0`` forces it). Scores are
``score(parent) + value`` in float64, summed from the root; ranks order a row by decreasing
value, ties to the smaller token id.

**One read of each row.** A row is read in blocks of :data:`~treespec_sim.rowmass.BLOCK`
entries, each block once from memory: a float64 block is first rounded to float32 (one vector
loop); then, each a loop of its own over the block (each vectorises alone, not fused), the
block's largest value (an integer max over order keys), its mass for the input check
(:mod:`treespec_sim.rowmass`) and, only in a block whose largest value reaches the float32
threshold, the keep test. A row's best value comes from its kept entries (exact), or, where it
keeps none, from its float32 maximum (an upper bound: thresholds and counts stay valid). The
input check's verdicts come out of the same read (:func:`dense_tree`'s ``info``): a row whose
float32 maximum is not below ``LOGPROB_POSITIVE_TOL`` or above ``-inf``, or whose mass is not
finite, is flagged for the exact check, and so is a mass within ``MASS_ERROR`` of the
tolerance.
"""

from __future__ import annotations

import math

import numpy as np
from numba import types
from numba.extending import overload

from ..jit import njit
from ..numerics import order_keys, sort_pairs
from ..rowmass import BLOCK, MASS_ERROR, block_mass
from ..validation import LOGPROB_POSITIVE_TOL

__all__ = ["THRESHOLD_SLACK", "best_first", "dense_tree", "ranked_tree", "slack"]

#: Relative slack on score thresholds: candidate sets are supersets by this margin, so rounding
#: in ``P_d`` never drops a node that belongs to the tree.
THRESHOLD_SLACK = 1e-9
# The certifier's histograms: path losses in bins of 1 / _LSCALE, score bounds in 1 / _HSCALE.
_LBINS, _LSCALE, _HBINS, _HSCALE = 512, 8.0, 2048, 16.0
# A row's sampled guess: _SAMPLE_RUNS runs of consecutive entries (few cache lines), evenly spaced.
_SAMPLE_ROW, _SAMPLE_RUNS = 512, 64
# The keep test reads a row in chunks of this many entries (a branch-free count, then the hits).
_CHUNK = 64
# ranked_tree pops smaller trees from the heap: fewer pops cost less than the certifier's bins.
_RANKED_HEAP_BELOW = 128


@njit(cache=True)
def slack(t):
    """:data:`THRESHOLD_SLACK` relative to ``t`` (0 for an infinite ``t``)."""
    return THRESHOLD_SLACK * (1.0 + abs(t)) if math.isfinite(t) else 0.0


@njit(cache=True)
def _kth_largest(a, n, k):
    """The ``k``-th largest (1-based) of ``a[:n]`` (no NaN), reordering ``a``: quickselect with
    median-of-three pivots."""
    lo, hi, want = 0, n - 1, k - 1
    while lo < hi:
        mid = lo + (hi - lo) // 2
        x, y, z = a[lo], a[mid], a[hi]
        piv = max(min(x, y), min(max(x, y), z))   # the median of the three
        i, j = lo, hi
        while i <= j:
            while a[i] > piv:
                i += 1
            while a[j] < piv:
                j -= 1
            if i <= j:
                a[i], a[j] = a[j], a[i]
                i += 1
                j -= 1
        if want <= j:
            hi = j
        elif want >= i:
            lo = i
        else:
            return a[want]
    return a[want]


# ---------------------------------------------------------------------------- a row's entries
@njit(cache=True)
def _compact(tok, val, scratch, n, k, theta):
    """A full kept list of ``n`` entries cut to its ``k`` best (ties at the ``k``-th value to
    the earlier entries, i.e. the smaller token ids), and ``theta`` raised just above the
    ``k``-th value: a later token at or below it has ``k`` ahead of it. Returns the new length
    and ``theta``."""
    scratch[:n] = val[:n]
    kth = _kth_largest(scratch, n, k)
    ties = k
    for j in range(n):
        if val[j] > kth:
            ties -= 1
    w = 0
    for j in range(n):
        v = val[j]
        if v > kth or (v == kth and ties > 0):
            if v == kth:
                ties -= 1
            tok[w] = tok[j]
            val[w] = v
            w += 1
    return w, max(theta, np.nextafter(kth, math.inf))


@njit(cache=True)
def _float32_below(theta):
    """The largest float32 ``<= theta``: a float32 test against it keeps a superset of the
    entries ``>= theta`` (of either dtype), which the exact test then filters."""
    f = np.float32(theta)
    while np.float64(f) > theta:
        f = np.float32(np.float64(f) - max(abs(np.float64(f)) * 2.0 ** -23, 1e-44))
    return f


def _float32_block(x, out):
    """``x`` as float32: itself if it is, else rounded into ``out[:x.size]`` (the keep test and
    the mass then read the block from L1)."""
    if x.dtype == np.float32:
        return x
    out[:x.size] = x
    return out[:x.size]


@overload(_float32_block)
def _float32_block_compiled(x, out):
    """:func:`_float32_block` compiled for ``x``'s dtype: no copy of a float32 block."""
    if x.dtype == types.float32:
        return lambda x, out: x

    def convert(x, out):
        for i in range(x.size):                   # vectorised
            out[i] = np.float32(x[i])
        return out[:x.size]
    return convert


@njit(cache=True, inline="always")
def _flip(b):
    """The order key of float32 bits ``b`` (int32), and back (the map is its own inverse):
    ``b ^ ((b >> 31) & 0x7FFFFFFF)`` orders float32 values as int32 (a NaN with its sign bit
    clear above ``+inf``, one with it set below ``-inf``)."""
    return b ^ ((b >> np.int32(31)) & np.int32(0x7FFFFFFF))


@njit(cache=True)
def _top_key(bits):
    """The largest order key (:func:`_flip`) of float32 bit patterns ``bits`` (int32). An integer
    max vectorises; a float max, which must honour NaN, does not."""
    top = np.int32(-0x80000000)
    for i in range(bits.size):
        top = np.int32(max(top, np.int32(_flip(bits[i]))))   # int32: 8 lanes, not 4 int64
    return top


@njit(cache=True)
def _order_key(value):
    """``value``'s order key (:func:`_flip`), both zeros at the key of ``-0.0``, so that
    ``x >= value`` for every number ``x`` whose key is at least this one."""
    box = np.empty(1, np.float32)
    box[0] = np.float32(-0.0) if value == 0.0 else value
    return _flip(box.view(np.int32)[0])


@njit(cache=True)
def _key_value(key):
    """The float32 value whose order key is ``key``, as float64."""
    box = np.empty(1, np.int32)
    box[0] = _flip(key)
    return np.float64(box.view(np.float32)[0])


@njit(cache=True)
def _row_pass(row, theta, tok, val, scratch, cap, k, work, want_sum):
    """One read of ``row``, block by block: every entry ``>= theta`` into ``tok``/``val``
    (compacted to the ``k`` best when full), the row's largest value rounded to float32 and,
    with ``want_sum``, the row's mass (:mod:`treespec_sim.rowmass`). ``work``: float32
    ``(2, BLOCK)`` scratch. Returns ``(n, theta, cut, top, mass)``.

    A block whose largest value is below the float32 threshold is not searched; the others are
    searched a chunk at a time (a branch-free count, then the hits)."""
    V = row.size
    n = 0
    cut = False
    mass = 0.0
    top = np.int32(-0x80000000)
    below = _float32_below(theta)
    floor_key = _order_key(below)
    b32, terms = work[0], work[1]
    at = np.empty(_CHUNK, np.int64)
    for lo in range(0, V, BLOCK):
        x = row[lo:lo + BLOCK]
        xb = _float32_block(x, b32)
        block_top = _top_key(xb.view(np.int32))
        top = max(top, block_top)
        if want_sum:
            mass += block_mass(xb, terms)
        if block_top < floor_key:
            continue
        for clo in range(0, xb.size, _CHUNK):
            part = xb[clo:clo + _CHUNK]
            hits = np.int32(0)
            for i in range(part.size):            # branch-free, int32: vectorised, 8 lanes
                hits = np.int32(hits + np.int32(part[i] >= below))
            if hits == 0:
                continue
            # the hits' positions, branch-free: a test per entry that a branch would mispredict
            m = 0
            for i in range(part.size):
                at[m] = i
                m += 1 if part[i] >= below else 0
            for j in range(m):
                i = at[j]
                v = np.float64(x[clo + i])
                if v >= theta:
                    # appended here: an inlined function that also calls _compact costs more
                    # than the append itself (docs/performance.md)
                    tok[n] = lo + clo + i
                    val[n] = v if v < 0.0 else 0.0
                    n += 1
                    if n >= cap:
                        n, theta = _compact(tok, val, scratch, n, k, theta)
                        cut = True
                        below = _float32_below(theta)
                        floor_key = _order_key(below)
    return n, theta, cut, _key_value(top), mass


@njit(cache=True)
def _sample_threshold(row, k0, theta, buf):
    """A guessed threshold leaving about ``2 k0`` entries of ``row``, from a sample of
    ``_SAMPLE_ROW`` of its values: ``(True, guess)``, or ``(False, theta)`` where the sample is
    too small or the guess not above ``theta``. Not certified: a list cut at it is complete
    only above it."""
    run = _SAMPLE_ROW // _SAMPLE_RUNS
    V = row.size
    stride = V // _SAMPLE_RUNS
    if stride < run:
        return False, theta
    ns = 0
    i = 0
    while i + run <= V and ns + run <= _SAMPLE_ROW:
        for q in range(i, i + run):
            v = np.float64(row[q])
            if v == v:
                buf[ns] = v
                ns += 1
        i += stride
    r = 2 * k0 * ns // V + 4
    if r >= ns:
        return False, theta
    g = _kth_largest(buf, ns, r)
    if not (g > theta) or not math.isfinite(g):
        return False, theta
    return True, g


# ---------------------------------------------------------------------------- the bound t
@njit(cache=True, fastmath={"reassoc"})
def _dot_counts(a, b):
    """``sum(a * b)`` of path counts: integers below 2^53 add exactly in any order."""
    s = 0.0
    for i in range(a.size):
        s += a[i] * b[i]
    return s


@njit(cache=True)
def _certify_row(cert, hist, val, m, pd1, t, budget):
    r"""Count the paths through one more row's kept entries ``val`` (its maximum ``m <= 0``;
    ``pd1 = P_{d+1}``) and return the certified bound given the old one ``t``.

    The counted nodes are every path over the rows' kept entries read so far:

    * a path of depth ``j`` has loss ``P_j - score >= 0``; a kept entry ``x`` of row ``d`` has
      loss ``m_d - x`` and goes to loss bin ``ceil(loss L)`` (``L = _LSCALE``; 0 exactly for the
      argmax, which loses nothing);
    * ``D_j[k]`` counts paths of depth ``j`` with loss ``<= k / L``:
      ``D_{j+1} = D_j * (the row's loss bins)`` (a convolution), bins whose score bound is
      already below ``t`` dropped (their paths and every extension score below ``t``);
    * ``G`` counts every path so far by score bound, in bins of ``1 / _HSCALE`` (each bound
      lowered by :func:`slack` first: the bounds are exact reals, the computed scores differ
      by a few ulps). The largest edge ``-(b + 1) / _HSCALE`` with ``budget`` counts at or above
      it is certified.

    ``cert``: float64 ``(2, _LBINS)``, ``D`` and the next one (row ``int(hist[0, 0])`` is
    ``D``); ``hist``: float64 ``(3, _HBINS)``: row 0 ``[which D, bins of D in use (0: none left
    above t), paths counted in G]``, row 1 the row's loss bins (forwards, then reversed from
    ``_LBINS``), row 2 ``G``. Counts are capped at 1e18 (exact below 2^53, far above any
    budget); paths not counted only weaken the bound.
    """
    state, lh, G = hist[0], hist[1], hist[2]
    cur, kd = int(state[0]), int(state[1])
    if kd == 0 or not math.isfinite(pd1):
        state[1] = 0.0
        return t
    kmax = _LBINS
    if math.isfinite(t):
        span = (pd1 - t) * _LSCALE + 1.0          # bins k with pd1 - k / L >= t, plus one
        kmax = 0 if span < 1.0 else (int(span) if span < _LBINS else _LBINS)
    if kmax == 0:
        state[1] = 0.0
        return t
    lh[:kmax] = 0.0
    lhi = 0
    for x in val:
        loss = (m - x) * _LSCALE                  # >= 0: m is the row's maximum
        if not (loss < kmax):
            continue
        c = math.ceil(loss)
        if c >= kmax:
            continue
        lh[c] += 1.0
        lhi = max(lhi, c + 1)
    lr = lh[_HBINS - lhi:]                        # lh reversed, at the end of row 1
    for c in range(lhi):
        lr[c] = lh[lhi - 1 - c]
    D, Dn = cert[cur], cert[1 - cur]
    top = 0
    gb = 0
    gcum = 0.0                                    # G[:gb]
    for k in range(kmax):
        # Dn[k] = sum over c of D[k - c] lh[c], both read forwards
        clo, chi = max(k - kd + 1, 0), min(k, lhi - 1)
        cnt = 0.0 if chi < clo else _dot_counts(D[k - chi:k - clo + 1], lr[lhi - 1 - chi:lhi - clo])
        cnt = min(cnt, 1e18)
        Dn[k] = cnt
        if cnt == 0.0:
            continue
        top = k + 1
        bound = pd1 - k / _LSCALE
        u = -(bound - slack(bound)) * _HSCALE     # >= 0
        if not (u < _HBINS):
            continue
        hb = int(u)
        G[hb] += cnt
        state[2] += cnt
        if hb < gb:
            gcum += cnt
        else:
            while gb <= hb:
                gcum += G[gb]
                gb += 1
        if gcum >= budget:
            # the later bins' paths score below the bound that certifies (within 1 / _HSCALE),
            # and so do their extensions: dropping them only weakens later bounds
            break
    state[0] = 1 - cur
    state[1] = top
    if state[2] < budget:
        return t
    cum = 0.0
    for b in range(_HBINS):
        cum += G[b]
        if cum >= budget:
            return max(-(b + 1) / _HSCALE, t)
    return t


@njit(cache=True)
def _new_certifier():
    cert = np.zeros((2, _LBINS))
    cert[0, 0] = 1.0                              # the root: depth 0, loss 0
    hist = np.zeros((3, _HBINS))
    hist[0, 1] = 1.0
    return cert, hist


# ---------------------------------------------------------------------------- the tree
@njit(cache=True)
def _enumerate(vals, toks, off, budget, t, cap, parent, token, depth):
    """The tree as every node scoring ``>= t`` (``t`` certified), enumerated depth first with
    children by rank and sorted stably by decreasing score (module docstring); writes nodes
    ``0..n`` and returns ``(n, score of node n)``, or ``(-1, nan)`` when more than ``cap``
    nodes score ``>= t``."""
    L = off.size - 1
    score = np.empty(cap)
    epar = np.empty(cap, np.int64)
    elev = np.empty(cap, np.int64)
    erank = np.empty(cap, np.int64)
    spar = np.empty(L + 1, np.int64)              # the stack: per level, the parent's index,
    ssc = np.empty(L + 1)                         # its score and the next rank to try
    srank = np.zeros(L + 1, np.int64)
    lev = 0
    spar[0] = -1
    ssc[0] = 0.0
    N = 0
    while lev >= 0:
        r = srank[lev]
        at = off[lev] + r
        sc = ssc[lev] + vals[at] if at < off[lev + 1] else -math.inf
        if at < off[lev + 1] and sc >= t:
            if N == cap:
                return -1, math.nan
            score[N] = -sc                        # increasing key = decreasing score
            epar[N] = spar[lev]
            elev[N] = lev
            erank[N] = r
            srank[lev] = r + 1
            if lev + 1 < L:
                lev += 1
                spar[lev] = N
                ssc[lev] = sc
                srank[lev] = 0
            N += 1
        else:
            lev -= 1                              # a list is sorted: later ranks score below t
    key = np.empty(N, np.uint64)
    order_keys(score[:N], key)
    order = np.arange(N)
    sort_pairs(key, order, np.empty(N, np.uint64), np.empty(N, np.int64))
    b = min(N, budget)
    pos = np.empty(N, np.int64)
    parent[0] = -1
    token[0] = -1
    depth[0] = 0
    for i in range(b):
        e = order[i]
        pos[e] = i + 1
        parent[i + 1] = 0 if epar[e] < 0 else pos[epar[e]]   # a parent precedes its children
        token[i + 1] = toks[off[elev[e]] + erank[e]]
        depth[i + 1] = elev[e] + 1
    return b, (-score[order[b - 1]] if b else 0.0)


@njit(cache=True)
def _rank_tuple(v_level, v_rank, v_parent, node_rank, node_parent, out):
    """The rank tuple of a heap entry, root to leaf, into ``out``; returns its length."""
    out[v_level] = v_rank
    v = v_parent
    for lev in range(v_level - 1, -1, -1):
        out[lev] = node_rank[v]
        v = node_parent[v]
    return v_level + 1


@njit(cache=True)
def _precedes(h, a, b, node_rank, node_parent, buf_a, buf_b):
    """Heap entry ``a`` before ``b`` in DDTree's order: higher score, then the smaller rank tuple
    (a prefix first). ``h``: ``(score, level, rank, parent)`` columns of the heap."""
    sa, sb = h[0, a], h[0, b]
    if sa != sb:
        return sa > sb
    la = _rank_tuple(int(h[1, a]), int(h[2, a]), int(h[3, a]), node_rank, node_parent, buf_a)
    lb = _rank_tuple(int(h[1, b]), int(h[2, b]), int(h[3, b]), node_rank, node_parent, buf_b)
    for i in range(min(la, lb)):
        if buf_a[i] != buf_b[i]:
            return buf_a[i] < buf_b[i]
    return la < lb


@njit(cache=True)
def _sift_up(h, i, node_rank, node_parent, buf_a, buf_b):
    while i > 0:
        p = (i - 1) // 2
        if not _precedes(h, i, p, node_rank, node_parent, buf_a, buf_b):
            break
        for c in range(4):
            h[c, i], h[c, p] = h[c, p], h[c, i]
        i = p


@njit(cache=True)
def _sift_down(h, n, node_rank, node_parent, buf_a, buf_b):
    i = 0
    while True:
        c = 2 * i + 1
        if c >= n:
            return
        if c + 1 < n and _precedes(h, c + 1, c, node_rank, node_parent, buf_a, buf_b):
            c += 1
        if not _precedes(h, c, i, node_rank, node_parent, buf_a, buf_b):
            return
        for col in range(4):
            h[col, i], h[col, c] = h[col, c], h[col, i]
        i = c


@njit(cache=True)
def best_first(vals, toks, off, budget, parent, token, depth):
    """DDTree's best-first pops over per-depth ranked lists: ``vals`` float64 and ``toks`` int64
    concatenated, depth ``d``'s list (best first) at ``off[d - 1]:off[d]`` (int64, ``L + 1``).

    Writes nodes ``0..n`` into ``parent``/``token``/``depth`` (``budget + 1`` entries each; node
    0 the root, token -1) and returns ``(n, score of the last pop)`` -- its values summed from the
    root (``0.0`` for the root-only tree).
    """
    L = off.size - 1
    score = np.empty(budget + 1)
    node_rank = np.empty(budget + 1, np.int64)
    h = np.empty((4, 2 * budget + 2))             # the heap: score, level, rank, parent
    buf_a = np.empty(max(L, 1), np.int64)
    buf_b = np.empty(max(L, 1), np.int64)
    parent[0] = -1
    token[0] = -1
    depth[0] = 0
    score[0] = 0.0
    node_rank[0] = -1
    n = 0
    hn = 0
    if L > 0 and off[1] > off[0]:
        h[0, 0], h[1, 0], h[2, 0], h[3, 0] = 0.0 + vals[off[0]], 0, 0, 0
        hn = 1
    while n < budget and hn > 0:
        sc, lev, r, par = h[0, 0], int(h[1, 0]), int(h[2, 0]), int(h[3, 0])
        hn -= 1
        for c in range(4):
            h[c, 0] = h[c, hn]
        _sift_down(h, hn, node_rank, parent, buf_a, buf_b)
        n += 1
        parent[n] = par
        token[n] = toks[off[lev] + r]
        depth[n] = lev + 1
        score[n] = sc
        node_rank[n] = r
        if off[lev] + r + 1 < off[lev + 1]:       # the next sibling
            h[0, hn], h[1, hn], h[2, hn], h[3, hn] = (score[par] + vals[off[lev] + r + 1],
                                                      lev, r + 1, par)
            hn += 1
            _sift_up(h, hn - 1, node_rank, parent, buf_a, buf_b)
        if lev + 1 < L and off[lev + 2] > off[lev + 1]:   # the first child
            h[0, hn], h[1, hn], h[2, hn], h[3, hn] = sc + vals[off[lev + 1]], lev + 1, 0, n
            hn += 1
            _sift_up(h, hn - 1, node_rank, parent, buf_a, buf_b)
    return n, score[n]


# ---------------------------------------------------------------------------- the one pass
@njit(cache=True)
def dense_tree(lp, budget, mass_tol, enum_cap):
    """DDTree's nodes on a C-contiguous float32/float64 ``(L, V)`` array, and the input check's
    verdicts on its rows.

    The module docstring's algorithm, one phase a function: read each row once and certify
    ``t`` (:func:`_first_pass`), read again the rows cut above ``t - P_d``
    (:func:`_reread_cut_rows`) and certify ``t`` afresh over them (:func:`_recertify`), rank
    each depth's entries ``>= t - P_d`` (:func:`_ranked_lists`), pop the tree
    (:func:`_pop_order`). The phases are inlined (``inline="always"``): they compile into
    this one function, so the split costs no speed.

    Parameters
    ----------
    lp : ndarray, shape (L, V)
        Any values: every value read is clamped to ``<= 0``, NaN is never kept, and a row the
        input check must look at again is counted in ``info[3]`` (the tree is then
        meaningless).
    budget : int
        ``B >= 1``.
    mass_tol : float
        ``>= 0``: form each row's total mass (:mod:`treespec_sim.rowmass`) and count the rows
        not within ``mass_tol`` of 1 by a clear margin (``info[4]``); negative: no masses.
    enum_cap : int
        The most nodes above the certified bound to enumerate before the heap pops the tree
        instead (-1: ``4 B + 64``; 0: always the heap; the same tree either way).

    Returns
    -------
    nodes : ndarray of int64, shape (3, n + 1)
        Parent, token (root -1) and depth of the nodes in pop order.
    mass : ndarray of float64, shape (L,)
        The rows' total masses, each within ``MASS_ERROR`` (zeros when ``mass_tol < 0``).
    info : ndarray of float64, shape (5,)
        Rows read a second time, whether the heap popped the tree, the certified bound ``t``;
        the rows whose largest value (rounded to float32) is not in ``(-inf, tol)``
        (``tol = LOGPROB_POSITIVE_TOL`` rounded down) or whose mass is not finite, which the
        caller checks exactly (:func:`~treespec_sim.validation.checked_row_max`; a row holding
        a NaN with its sign bit set shows only in its mass); the rows whose mass is within
        ``MASS_ERROR`` of failing ``mass_tol`` or fails it
        (:func:`~treespec_sim.validation.check_masses` decides them).
    """
    L, V = lp.shape
    K = min(budget, V)
    k0 = min(2 * ((budget + L - 1) // L) + 16, K)
    want_sum = mass_tol >= 0.0
    kept_val, kept_tok, row_off, row_len, used, pbest, row_max, cut, top, mass, t = _first_pass(
        lp, budget, want_sum, k0, K)
    kept_val, kept_tok, used, rereads = _reread_cut_rows(lp, t, pbest, cut, K, kept_val,
                                                         kept_tok, row_off, row_len, used)
    if rereads:
        # the rows read again hold more paths: count them all again (a few microseconds)
        t = _recertify(kept_val, row_off, row_len, row_max, pbest, t, budget)
    vals, toks, off = _ranked_lists(kept_val, kept_tok, row_off, row_len, used, pbest, t, K)
    nodes, heap, _ = _pop_order(vals, toks, off, budget, t, enum_cap)
    suspect, unclear = _verdicts(top, mass, want_sum, mass_tol)
    info = np.array([rereads, 1.0 if heap else 0.0, t, suspect, unclear])
    return nodes, mass, info


@njit(cache=True)
def _verdicts(top, mass, want_sum, mass_tol):
    """``(suspect, unclear)`` row counts of :func:`dense_tree`'s ``info``."""
    limit = np.float64(_float32_below(LOGPROB_POSITIVE_TOL))
    suspect = 0
    unclear = 0
    for d in range(top.size):
        if not (-math.inf < top[d] < limit) or (want_sum and not math.isfinite(mass[d])):
            suspect += 1
        if want_sum and not abs(mass[d] - 1.0) <= mass_tol - MASS_ERROR * mass[d]:
            unclear += 1
    return suspect, unclear


@njit(cache=True)
def _row_best(val, n, top):
    """A row's best kept value, its maximum clamped to ``<= 0``: exact from the ``n`` kept
    entries (the best is always kept when any is); without any, an upper bound from ``top``,
    the maximum rounded to float32 (thresholds and counts stay valid with any upper bound)."""
    if n > 0:
        best = val[0]
        for j in range(1, n):
            best = max(best, val[j])
        return best
    if top == -math.inf:
        return -math.inf
    if not top < 0.0:
        return 0.0
    return min(top - top * 2.0 ** -23 + 1e-44, 0.0)


@njit(cache=True, inline="always")
def _first_pass(lp, budget, want_sum, k0, K):
    """Read each row once, top down: its mass (``want_sum``), its largest value rounded to
    float32, its entries at or above its threshold (a certified ``t - P_d``, else a sampled
    guess; at most about ``k0`` kept, ``K`` in the first row), then the bound ``t`` certified
    again over the rows read so far.

    Returns ``(kept_val, kept_tok, row_off, row_len, used, pbest, row_max, cut, top, mass, t)``:
    the kept entries (row ``d``'s at ``row_off[d]:row_off[d] + row_len[d]``, in token order,
    ``used`` in all), ``pbest[d] = P_d`` (``L + 1``), each row's best value
    (:func:`_row_best`), ``cut[d]`` the value above which row ``d``'s list is complete, the
    rows' float32 maxima, their masses and the certified ``t``.
    """
    L, V = lp.shape
    cap = 4 * k0 + 64
    cap_first = max(4 * K + 64, cap)
    tok = np.empty(cap_first + 1, np.int64)
    val = np.empty(cap_first + 1)
    scratch = np.empty(cap_first + 1)
    work = np.empty((2, BLOCK), np.float32)
    sample = np.empty(_SAMPLE_ROW)
    pbest = np.zeros(L + 1)
    row_max = np.empty(L)
    top = np.empty(L)
    cut = np.empty(L)                             # a row's list is complete above cut[d]
    kept_val = np.empty((L - 1) * cap + cap_first)  # the rows' kept entries, row d's at
    kept_tok = np.empty(kept_val.size, np.int64)    # row_off[d]:row_off[d] + row_len[d]
    row_off = np.zeros(L, np.int64)
    row_len = np.zeros(L, np.int64)
    used = 0
    mass = np.zeros(L)
    cert, hist = _new_certifier()
    t = -math.inf                                 # certified: >= budget nodes score >= t
    for d in range(L):
        row = lp[d]
        theta = t - pbest[d] - slack(t) if math.isfinite(t) else -math.inf
        # the first row's depth-1 nodes have no parent to limit them: it keeps its top K, as
        # a row read again does, so that a tree drawn mostly from it needs no second read
        k, kcap = (K, cap_first) if d == 0 else (k0, cap)
        guessed = False
        if not math.isfinite(t) and V > 8 * k:
            guessed, theta = _sample_threshold(row, k, theta, sample)
        n, theta, dropped, top[d], mass[d] = _row_pass(row, theta, tok, val, scratch, kcap, k,
                                                       work, want_sum)
        m = _row_best(val, n, top[d])
        row_max[d] = m
        pbest[d + 1] = pbest[d] + m
        # a list holding the row's top K is complete for the tree: no entry below them enters
        # it (a compaction to k < K may have dropped some of them)
        top_k = n >= K if not dropped else k >= K
        cut[d] = theta if (guessed or dropped) and not top_k else -math.inf
        row_off[d], row_len[d] = used, n
        kept_val[used:used + n] = val[:n]
        kept_tok[used:used + n] = tok[:n]
        used += n
        t = _certify_row(cert, hist, val[:n], m, pbest[d + 1], t, budget)
    return kept_val, kept_tok, row_off, row_len, used, pbest, row_max, cut, top, mass, t


@njit(cache=True, inline="always")
def _reread_cut_rows(lp, t, pbest, cut, K, kept_val, kept_tok, row_off, row_len, used):
    """Rows whose short list was cut above ``t - P_d``: read again, up to ``K`` entries, their
    new lists appended to the kept entries (``row_off``/``row_len`` updated in place).
    Returns ``(kept_val, kept_tok, used, rereads)``."""
    L, V = lp.shape
    rereads = 0
    wcap = 4 * K + 64
    tok = np.empty(0, np.int64)                   # work arrays, sized on the first reread
    val = np.empty(0)
    scratch = np.empty(0)
    sample = np.empty(0)
    work = np.empty((0, 0), np.float32)
    for d in range(L):
        thr = t - pbest[d] - slack(t) if math.isfinite(t) else -math.inf
        if not (cut[d] > thr):
            continue
        if rereads == 0:
            tok = np.empty(wcap + 1, np.int64)
            val = np.empty(wcap + 1)
            scratch = np.empty(wcap + 1)
            sample = np.empty(_SAMPLE_ROW)
            work = np.empty((2, BLOCK), np.float32)
        rereads += 1
        row = lp[d]
        guess = V > 8 * K
        while True:
            # guess a threshold leaving ~2K entries; if fewer than K are at or above it (and no
            # compaction proved the row's top K kept), read the row again without it
            theta = thr
            if guess:
                guess, theta = _sample_threshold(row, K, theta, sample)
            n, theta, dropped, _, _ = _row_pass(row, theta, tok, val, scratch, wcap, K, work,
                                                False)
            if not guess or dropped or n >= K:
                break
            guess = False
        if used + n > kept_val.size:
            grown = max(2 * kept_val.size, used + n)
            kept_val = np.concatenate((kept_val[:used], np.empty(grown - used)))
            kept_tok = np.concatenate((kept_tok[:used], np.empty(grown - used, np.int64)))
        row_off[d], row_len[d] = used, n
        kept_val[used:used + n] = val[:n]
        kept_tok[used:used + n] = tok[:n]
        used += n
    return kept_val, kept_tok, used, rereads


@njit(cache=True, inline="always")
def _recertify(kept_val, row_off, row_len, row_max, pbest, t, budget):
    """The bound certified afresh over every row's kept entries, given the old one ``t``."""
    cert, hist = _new_certifier()
    for d in range(row_off.size):
        lo = row_off[d]
        t = _certify_row(cert, hist, kept_val[lo:lo + row_len[d]], row_max[d], pbest[d + 1], t,
                         budget)
    return t


@njit(cache=True, inline="always")
def _ranked_lists(kept_val, kept_tok, row_off, row_len, used, pbest, t, K):
    """Per depth: the kept values ``>= t - P_d``, ranked (decreasing value, ties to the smaller
    token: a row's entries are in token order and the sort is stable), at most ``K``; as
    :func:`best_first` takes them, ``(vals, toks, off)``."""
    L = row_off.size
    sl = slack(t)
    off = np.zeros(L + 1, np.int64)
    vals = np.empty(used)
    toks = np.empty(used, np.int64)
    neg = np.empty(used)
    key = np.empty(used, np.uint64)
    pay = np.empty(used, np.int64)
    tk = np.empty(used, np.uint64)
    tp = np.empty(used, np.int64)
    w = 0
    for d in range(L):
        thr = t - pbest[d] - sl if math.isfinite(t) else -math.inf
        m = 0
        for j in range(row_off[d], row_off[d] + row_len[d]):
            if kept_val[j] >= thr:
                neg[m] = -kept_val[j]
                pay[m] = j
                m += 1
        order_keys(neg[:m], key[:m])
        sort_pairs(key[:m], pay[:m], tk, tp)
        m = min(m, K)
        for j in range(m):
            vals[w + j] = kept_val[pay[j]]
            toks[w + j] = kept_tok[pay[j]]
        w += m
        off[d + 1] = w
    return vals, toks, off


@njit(cache=True, inline="always")
def _pop_order(vals, toks, off, budget, t, enum_cap):
    """The tree's nodes in DDTree's pop order, ``(3, n + 1)`` (parent, token, depth): every node
    scoring ``>= t`` enumerated and sorted (:func:`_enumerate`, ``enum_cap`` of them at most;
    -1: ``4 B + 64``), else the heap's pops (:func:`best_first`); whether the heap ran; the
    last node's score."""
    out = np.empty((3, budget + 1), np.int64)
    if enum_cap < 0:
        enum_cap = 4 * budget + 64
    n, last = -1, math.nan
    if math.isfinite(t) and enum_cap > 0:         # every tree node scores >= t
        n, last = _enumerate(vals, toks, off, budget, t, enum_cap, out[0], out[1], out[2])
    heap = n < 0
    if heap:
        n, last = best_first(vals, toks, off, budget, out[0], out[1], out[2])
    return out[:, :n + 1].copy(), heap, last


@njit(cache=True)
def ranked_tree(vals, toks, off, budget):
    """DDTree's nodes over per-depth ranked lists (as :func:`best_first` takes them, values
    clamped to ``<= 0``): the bound ``t`` certified over every path of the lists
    (:func:`_certify_row`, each list's first value its maximum), then :func:`_pop_order`;
    below :data:`_RANKED_HEAP_BELOW` nodes the heap pops them (fewer pops than the
    certifier's bins). Returns ``(nodes, last)``: ``(3, n + 1)`` parent, token and depth in pop
    order, and the last node's score (``0.0`` for the root-only tree)."""
    if budget < _RANKED_HEAP_BELOW:
        nodes, _, last = _pop_order(vals, toks, off, budget, -math.inf, 0)
        return nodes, last
    L = off.size - 1
    cert, hist = _new_certifier()
    pbest = np.zeros(L + 1)
    t = -math.inf
    for d in range(L):
        lo, hi = off[d], off[d + 1]
        m = vals[lo] if hi > lo else -math.inf
        pbest[d + 1] = pbest[d] + m
        t = _certify_row(cert, hist, vals[lo:hi], m, pbest[d + 1], t, budget)
    nodes, _, last = _pop_order(vals, toks, off, budget, t, -1)
    return nodes, last
