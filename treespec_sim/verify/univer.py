r"""UniVer's horizontal steps and the per-node step choosers (``docs/theory/univer.md``).

Node ``a`` is visited with scale :math:`s` and target :math:`r = p_a`, so the sub-probability
target is :math:`\mu = s\,r`. Its ``k`` children :math:`x_1, \dots, x_k` were drawn
sequentially without replacement from :math:`q = q_a`. A *step* fixes the order in which the
children are tried and the law :math:`\rho` each trial is judged against; every step below is
speculative sampling of a draw against the law it really has *given what came before*, so each
is lossless given the past, and any choice among them that does not read the node's drafted
children (or anything below them) is lossless:

``traversal``
    :math:`x_1, x_2, \dots` in draw order, :math:`\rho_i = q` renormalised off
    :math:`x_{<i}` (Traversal verification, Weng et al., arXiv 2505.12398).
``conditional``
    hold :math:`T = x_{<k}`; try :math:`x_k` against :math:`q(\cdot \mid \notin T)`, then each
    held child as a point mass (Hu et al.'s Greedy plan given ``T``, arXiv 2502.18779).
``reverse`` (``k = 2``)
    try :math:`x_2` against its marginal
    :math:`m_2(y) = q(y) \sum_{a \ne y} u(a)`, :math:`u = q/(1-q)`, then :math:`x_1` against
    :math:`\rho(a \mid x_2 = y) = u(a) / (U - u(y))`, :math:`U = \sum u`.
``condrev`` (``k = 2``)
    hold :math:`x_2`; try :math:`x_1` against :math:`u(a)/(U - u(x_2))`, then :math:`x_2` as a
    point mass.
``coin+STEP``
    with probability :math:`s` run the node at scale 1 with ``STEP``, else delete it (emits
    :math:`s\,P(\cdot \mid a)`, like every visit).

A *chooser* maps what a verifier legally knows at the node (:class:`NodeView`: scale, target
row, proposal, the shape; never the drafted children) to a step.

Values. For leaf children the expected accepted mass of each step is exact in closed form for
``k = 2`` (:func:`two_child_accepts`, :math:`O(V \log V)` by sorting ratios):

.. math::
    A^{\mathrm{trav}}_1 = \textstyle\sum_y \min(\mu, q),\quad
    A^{\mathrm{trav}}_2 = \sum_a (q - \mu)_+(a)\,
        \sum_y \min\!\Bigl(\frac{(\mu - q)_+(y)}{R},\ \frac{q(y)}{1 - q(a)}\Bigr),
    \quad R = \textstyle\sum (q - \mu)_+,

.. math::
    A^{\mathrm{cond}}_1 = \textstyle\sum_a q(a)\,\mu(a),\quad
    A^{\mathrm{cond}}_2 = \sum_a q(a) \sum_{y \ne a} \min\!\Bigl(\mu(y), \frac{q(y)}{1-q(a)}\Bigr),

and ``reverse``/``condrev`` the same with :math:`(q, q/(1-q(a)))` replaced by
:math:`(m_2, u/(U - u(y)))` and the positions swapped; ``coin+STEP`` is worth :math:`s` times
``STEP`` at scale 1. For ``k >= 3`` the values are enumerated over the draws when the ordered
tuples of the support number at most :data:`ENUM_LIMIT` (:func:`enumerated_accepts`).

Choosers (rule names):

``univer`` (safe)
    exact argmax of the accepted mass where all of a node's children are leaves (ties and
    unenumerable ``k >= 3`` nodes: traversal), traversal elsewhere. Lossless; :math:`E[\tau]
    \ge` Traversal's on every tree and world (proof in ``docs/theory/univer.md`` §3).
``univer-guided``
    at every node, argmax of the expected accepted *weight* with child weights
    :math:`w_i = ` size of child ``i``'s subtree (``1 +`` nodes below it). Lossless; no
    dominance guarantee.
``univer-fixed``
    ``conditional`` at every node (the earlier reconstruction; exact for Greedy drafts).
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from ..numerics import dot, stable_argsort

__all__ = ["CHOOSERS", "COIN", "ENUM_LIMIT", "STEPS", "NodeView", "choose_guided",
           "choose_safe", "enumerated_accepts", "node_accepts", "step_value", "trials",
           "two_child_accepts"]

#: Horizontal steps (``coin+`` may prefix any of them).
STEPS = ("traversal", "conditional", "reverse", "condrev")
#: Prefix of a coin step: with probability ``s`` run the node at scale 1, else delete it.
COIN = "coin+"
#: Largest number of ordered child tuples a ``k >= 3`` node's values are enumerated over.
ENUM_LIMIT = 720
#: A step replaces traversal only if it is better by more than this (relative): ties and
#: rounding go to traversal.
TIE_TOL = 1e-12


@dataclass(frozen=True)
class NodeView:
    """What a verifier may base node ``node``'s step on: everything but its drafted children.

    Attributes
    ----------
    node : int
        Node id in the tree (the shape is fixed before the draws).
    path : tuple of int
        Tokens on the path to ``node`` (root excluded).
    scale : float
        Prefix acceptance probability :math:`s` of this visit.
    target : ndarray (V,)
        The node's target row :math:`r = p_a` (before any child is tried).
    proposal : ndarray (V,)
        The law :math:`q_a` the children were drawn from.
    child_sizes : tuple of int
        Nodes in each child's subtree (the child included), in draw order.
    """

    node: int
    path: tuple[int, ...]
    scale: float
    target: np.ndarray
    proposal: np.ndarray
    child_sizes: tuple[int, ...]

    @property
    def n_children(self) -> int:
        return len(self.child_sizes)

    @property
    def leaf_children(self) -> bool:
        """Whether every child is a leaf (then the step values are exact)."""
        return all(size == 1 for size in self.child_sizes)


Chooser = Callable[[NodeView], str]


# ----------------------------------------------------------------------------- trials
def _point_mass(token: int, vocab: int) -> np.ndarray:
    row = np.zeros(vocab)
    row[token] = 1.0
    return row


def _sum_except(x: np.ndarray) -> np.ndarray:
    r""":math:`\sum_{j \ne i} x_j` for every ``i``, without cancelling against a dominant entry."""
    top = int(np.argmax(x))
    rest = float(x.sum() - x[top]) if x.size < 2 else float(np.delete(x, top).sum())
    out = (x[top] - x) + rest
    out[top] = rest
    return out


def _odds(q: np.ndarray) -> np.ndarray:
    """:math:`u = q/(1-q)` with :math:`1 - q(a)` as the mass of the other tokens (finite: a
    node with two distinct draws has two tokens of positive mass)."""
    return q / np.maximum(_sum_except(q), 1e-300)


def trials(step: str, q: np.ndarray, tokens: np.ndarray) -> Iterator[tuple[int, np.ndarray]]:
    """Yield ``(child position, trial proposal)`` in trial order for one node's children.

    ``tokens`` are the children's tokens in draw order; the proposals are the laws of the
    tried child given everything tried or held before it (see the module docstring).
    """
    k = tokens.size
    if step == "traversal" or k == 1:
        left = q.copy()
        for i, x in enumerate(tokens):
            yield i, left / left.sum()
            left[x] = 0.0
        return
    if step == "conditional":
        q_last = q.copy()
        q_last[tokens[:-1]] = 0.0
        yield k - 1, q_last / q_last.sum()
        for i in range(k - 1):
            yield i, _point_mass(int(tokens[i]), q.size)
        return
    if k != 2 or step not in ("reverse", "condrev"):
        raise ValueError(f"step {step!r} is not defined for {k} children")
    u = _odds(q)
    first_given_second = u.copy()
    first_given_second[tokens[1]] = 0.0
    first_given_second /= first_given_second.sum()
    if step == "reverse":
        m2 = q * _sum_except(u)
        yield 1, m2 / m2.sum()
        yield 0, first_given_second
    else:  # condrev
        yield 0, first_given_second
        yield 1, _point_mass(int(tokens[1]), q.size)


def node_accepts(mu: np.ndarray, tokens: np.ndarray, step: str, q: np.ndarray) -> np.ndarray:
    r"""Accepted mass of each child (draw order) for fixed tokens: trial ``j`` visits its
    child with scale :math:`\min(1, \mu_j(x)/\rho_j(x))` after the earlier trials failed."""
    out = np.zeros(tokens.size)
    reach = 1.0
    cur = mu.astype(np.float64)
    for pos, rho in trials(step, q, tokens):
        x = int(tokens[pos])
        s_c = 1.0 if cur[x] >= rho[x] else cur[x] / rho[x]
        out[pos] = reach * s_c
        if s_c >= 1.0:
            break
        diff = cur - rho
        r_mass = float(np.maximum(rho - cur, 0.0).sum())  # np.clip(-diff, 0): same bits
        if r_mass <= 1e-15:
            break
        reach *= 1.0 - s_c  # this draw's trial failed
        cur = np.maximum(diff, 0.0) / r_mass
    return out


def _ordered_draws(q: np.ndarray, k: int) -> Iterator[tuple[np.ndarray, float]]:
    """Every ordered ``k``-tuple of sequential draws without replacement, with its probability."""
    support = [int(x) for x in np.flatnonzero(q > 0)]
    for tup in itertools.permutations(support, k):
        prob, left = 1.0, q.copy()
        for x in tup:
            prob *= q[x] / left.sum()
            left[x] = 0.0
        yield np.array(tup), prob


def n_ordered_draws(q: np.ndarray, k: int) -> int:
    """Number of ordered ``k``-tuples of distinct tokens in ``q``'s support."""
    n = int(np.count_nonzero(q > 0))
    return math.perm(n, k) if k <= n else 0


def enumerated_accepts(mu: np.ndarray, q: np.ndarray, k: int, step: str) -> np.ndarray:
    """Expected accepted mass per child position, enumerated over every ordered draw."""
    total = np.zeros(k)
    for tup, prob in _ordered_draws(q, k):
        total += prob * node_accepts(mu, tup, step, q)
    return total


# ----------------------------------------------------------------------------- closed forms
def _sum_min(g: np.ndarray, h: np.ndarray, c: np.ndarray) -> np.ndarray:
    r""":math:`F(c) = \sum_y \min(g(y), c\,h(y))` for every ``c`` (vectorised, sorted ratios).

    The reference form (one full sort of the ``V`` ratios); :func:`_sum_min_sorted` gives the
    same floats from a sort of the support only.
    """
    t = np.divide(g, h, out=np.full(h.shape, np.inf), where=h > 0)  # inf where h == 0
    order = np.argsort(t)  # ties need no order: the sums at a tied boundary include all of them
    ts, gs, hs = t[order], g[order], h[order]
    g_pre = np.concatenate([[0.0], np.cumsum(gs)])
    h_suf = np.concatenate([np.cumsum(hs[::-1])[::-1], [0.0]])
    idx = np.searchsorted(ts, c, side="right")
    return g_pre[idx] + c * h_suf[idx]


#: Breakpoints inside the query range up to which :func:`_sum_min_sorted` locates queries by
#: comparisons (one pass over the queries each) rather than a binary search per query.
_FEW_BREAKS = 8

_WORK = threading.local()


def _work(name: str, n: int, dtype=np.float64) -> np.ndarray:
    """Scratch array ``name`` of ``n`` entries, reused by every call in this thread.

    Why: at ``V = 32768`` a fresh ``(V,)`` array is 256 KB, and glibc hands the freed top of
    the heap back to the OS, so the next one page-faults in again (~60 faults, tens of us):
    a step allocating ten of them spent most of its time there. The closed forms call no
    user code, so a buffer is never in use twice at once; nothing that outlives a call (the
    returned values, :class:`_LawTerms`' caches) lives in one.
    """
    pool = getattr(_WORK, "pool", None)
    if pool is None:
        pool = _WORK.pool = {}
    buf = pool.get(name)
    if buf is None or buf.size < n or buf.dtype != dtype:
        buf = pool[name] = np.empty(max(n, 1), dtype)
    return buf[:n]


#: Up to this many dropped positions :func:`_drop` copies the runs between them.
_FEW_DROPS = 64


def _drop(a: np.ndarray, gone: np.ndarray, name: str) -> np.ndarray:
    """``a`` without the positions ``gone`` (sorted): ``a[mask]`` of the others, in order.

    Few positions: the runs between them copied into scratch array ``name``
    (``np.compress(out=)`` is buffered, ~10x slower); many: a plain boolean gather.
    """
    if gone.size == 0:
        return a
    if gone.size > _FEW_DROPS:
        keep = np.ones(a.size, dtype=bool)
        keep[gone] = False
        return a[keep]
    edges = [-1, *gone.tolist(), a.size]
    runs = [a[lo + 1:hi] for lo, hi in itertools.pairwise(edges)]
    return np.concatenate(runs, out=_work(name, a.size - gone.size))


def _sorted_support(gk: np.ndarray, hk: np.ndarray, presorted: bool
                    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None] | None:
    r"""Sort the support ``(g, h)`` pairs (both ``> 0``) by ratio :math:`t = g/h`.

    Parameters
    ----------
    gk, hk : ndarray float64 (m,)
        ``g`` and ``h`` on the support (tokens with ``g > 0`` and ``h > 0``), in any order.
    presorted : bool
        The order is expected to sort them already (an order shared from another scale of the
        same target): it is checked in one pass and re-sorted (stably: ``O(m)`` on nearly sorted
        input) only where rounding broke it.

    Returns
    -------
    (ts, gs, hs, perm) : ndarray (m,) each (``perm`` None if the input was sorted), or None
        Ratios, ``g`` and ``h`` in ratio order (``ts`` a scratch array), and the permutation
        of the input that sorts them. None where two tied ratios carry different pairs: the
        reference's sums then depend on its order within the tie, which only the reference
        sort (:func:`_sum_min`) reproduces.
    """
    # the reference's np.divide(where=h > 0) on these entries: the same floats
    tk = np.divide(gk, hk, out=_work("tk", gk.size))
    perm = None
    if tk.size > 1 and (not presorted or bool((tk[1:] < tk[:-1]).any())):
        # stable either way (any sort of the ratios gives these floats: tied ratios with
        # different pairs return None below), so that the compiled radix sort can serve
        perm = np.argsort(tk, kind="stable") if presorted else stable_argsort(tk)
        tk, gk, hk = tk[perm], gk[perm], hk[perm]
    tied = np.flatnonzero(tk[1:] == tk[:-1])  # == (not a difference): inf ties with inf
    if tied.size and ((gk[tied] != gk[tied + 1]).any() or (hk[tied] != hk[tied + 1]).any()):
        return None
    return tk, gk, hk, perm


def _sum_min_sorted(ts: np.ndarray, gs: np.ndarray, hs: np.ndarray, c: np.ndarray,
                    c_lo: float, c_hi: float, out: np.ndarray) -> np.ndarray:
    r""":func:`_sum_min` from the support sorted by ratio (:func:`_sorted_support`): the same
    floats, for queries ``c`` within ``[c_lo, c_hi]``, all ``> 0``.

    Why the floats are the reference's: a token with ``g = 0`` has ratio 0 and adds 0.0 to the
    prefix sums (it sorts before every ``c > 0``), one with ``h = 0`` has ratio ``inf`` and adds
    0.0 to the suffix sums, so the reference's cumulative sums restricted to the support are
    these, term for term in the same order. Only the prefix up to the last ratio ``<= c_hi``
    and the suffix from the first ratio ``>= c_lo`` are accumulated, and a query is located
    among the ratios inside ``[c_lo, c_hi]`` only (usually none or a few).

    Parameters
    ----------
    ts, gs, hs : ndarray float64 (m,)
        Ratios (non-decreasing), ``g`` and ``h`` of the support.
    c : ndarray float64 (n,)
        Queries, ``c_lo <= c <= c_hi``.
    out : ndarray float64 (n,)
        Written with the result (not ``c``).

    Returns
    -------
    out : ndarray float64 (n,)
    """
    lo = int(np.searchsorted(ts, c_lo, side="left"))
    hi = int(np.searchsorted(ts, c_hi, side="right"))
    # g_pre[i] and h_suf[i] of the reference for i = lo..hi
    g_pre = np.empty(hi - lo + 1)
    if hi:
        g_cum = np.cumsum(gs[:hi], out=_work("cum", hi))  # sequential, like the reference
        g_pre[0] = g_cum[lo - 1] if lo else 0.0
        g_pre[1:] = g_cum[lo:hi]
    else:
        g_pre[0] = 0.0
    h_suf = np.zeros(hi - lo + 1)
    if lo < ts.size:
        tail = np.cumsum(hs[lo:][::-1])[::-1]  # from the last entry down, like the reference
        h_suf[: min(tail.size, hi - lo + 1)] = tail[: hi - lo + 1]
    breaks = ts[lo:hi]
    if breaks.size == 0:  # g_pre[idx] + c * h_suf[idx] with one idx for all
        np.multiply(c, h_suf[0], out=out)
        return np.add(out, g_pre[0], out=out)
    if breaks.size <= _FEW_BREAKS:
        j = _work("j", c.size, np.intp)
        j[:] = 0
        for b in breaks.tolist():
            j += c >= b  # searchsorted(side="right"): breakpoints <= c
    else:
        j = np.searchsorted(breaks, c, side="right")
    np.take(h_suf, j, out=out, mode="clip")  # "clip": unbuffered; j is in range
    np.multiply(c, out, out=out)
    return np.add(out, np.take(g_pre, j, out=_work("gj", c.size), mode="clip"), out=out)


class _LawTerms:
    """The ``q``-only terms of :func:`two_child_accepts`, computed once per node and shared by
    its steps and their coin variants (the same floats as computing them per step), and the
    ratio orders its conditional steps share across scales."""

    def __init__(self, q: np.ndarray):
        self.q = q
        self._rest: np.ndarray | None = None
        self._fwd: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._rev: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
        self._held: dict[str, tuple] = {}
        self._c_range: dict[str, tuple[float, float]] = {}
        self._base_pos: dict[str, np.ndarray | None] = {}
        # family -> (support tokens in ratio order, second_base on them)
        self._orders: dict[str, tuple[np.ndarray, np.ndarray]] = {}

    def _q_rest(self) -> np.ndarray:
        """``max(_sum_except(q), 1e-300)``: 1 - q(a) as the other tokens' mass, shared by
        :meth:`forward` and :meth:`reverse` (:func:`_odds` divides by it)."""
        if self._rest is None:
            self._rest = np.maximum(_sum_except(self.q), 1e-300)
        return self._rest

    def forward(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(first, cond, second_base)`` of traversal / conditional."""
        if self._fwd is None:
            q = self.q  # x1's law; c(a) for x2 | a
            self._fwd = (q, 1.0 / self._q_rest(), q)
        return self._fwd

    def reverse(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(first, cond, second_base)`` of reverse / condrev."""
        if self._rev is None:
            u = self.q / self._q_rest()  # _odds(q), its _sum_except shared with forward
            u_rest = _sum_except(u)
            # m2: law of x2; rho(a | x2 = y) = u(a) * cond[y]
            self._rev = (self.q * u_rest, 1.0 / np.maximum(u_rest, 1e-300), u)
        return self._rev

    def terms(self, family: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        return self.forward() if family == "fwd" else self.reverse()

    def c_range(self, family: str) -> tuple[float, float]:
        """``(min, max)`` of ``cond`` over all tokens: brackets every query of the family."""
        out = self._c_range.get(family)
        if out is None:
            cond = self.terms(family)[1]
            out = self._c_range[family] = (float(cond.min()), float(cond.max()))
        return out

    def held(self, family: str) -> tuple:
        """``(nz, first[nz], cond[nz], cond[nz] * second_base[nz])`` of the conditional steps
        (``nz`` None where ``first > 0`` everywhere: then the gathers are the arrays)."""
        out = self._held.get(family)
        if out is None:
            first, cond, base = self.terms(family)
            pos = first > 0
            if pos.all():
                out = (None, first, cond, cond * base)
            else:
                nz = np.flatnonzero(pos)
                out = (nz, first[nz], cond[nz], cond[nz] * base[nz])
            self._held[family] = out
        return out

    def sorted_support(self, family: str, g: np.ndarray):
        """:func:`_sorted_support` of ``(g, second_base)`` for a conditional step, reusing the
        ratio order of the family's first call (another scale of the same target) when it
        covers this support."""
        base = self.terms(family)[2]
        if family not in self._base_pos:  # None: positive everywhere
            pos = base > 0
            self._base_pos[family] = None if pos.all() else pos
        base_pos = self._base_pos[family]
        g_pos = g > 0
        keep = g_pos if base_pos is None else g_pos & base_pos
        n_keep = int(np.count_nonzero(keep))
        hint = self._orders.get(family)
        if hint is not None:
            order, base_sorted = hint
            if n_keep == order.size == g.size:  # everything is kept: the order as it is
                # mode="clip": the same gather, unbuffered (the indices are valid)
                gk = np.take(g, order, out=_work("gk", g.size), mode="clip")
                return _sorted_support(gk, base_sorted, presorted=True)
            inside = keep[order]
            if int(np.count_nonzero(inside)) == n_keep:  # inside the hint's support
                sel = order[inside]
                return _sorted_support(g[sel], base[sel], presorted=True)
        if n_keep == g.size:  # all kept: no gathers
            sel = np.arange(g.size)
            out = _sorted_support(g, base, presorted=False)
        else:
            sel = np.flatnonzero(keep)
            out = _sorted_support(g[sel], base[sel], presorted=False)
        if out is not None and hint is None:
            # the tokens in ratio order (and their second_base), for the family's other scales
            order = sel if out[3] is None else sel[out[3]]
            self._orders[family] = (order, out[2].copy() if out[3] is None else out[2])
        return out


def _two_child_reference(mu: np.ndarray, step: str, terms: _LawTerms) -> np.ndarray:
    """:func:`two_child_accepts` with one full sort per step (the reference floats)."""
    first, cond, second_base = terms.terms("fwd" if step in ("traversal", "conditional")
                                           else "rev")
    if step in ("traversal", "reverse"):
        a1 = float(np.minimum(mu, first).sum())
        e = np.maximum(first - mu, 0.0)  # np.maximum: np.clip's values, ~10x faster
        r_mass = float(e.sum())
        a2 = 0.0
        if r_mass > 1e-15:
            mu2 = np.maximum(mu - first, 0.0) / r_mass
            nz = np.flatnonzero(e > 0)
            a2 = dot(e[nz], _sum_min(mu2, second_base, cond[nz]))
        out = np.array([a1, a2])
    else:
        held = dot(first, mu)
        nz = np.flatnonzero(first > 0)
        inner = (_sum_min(mu, second_base, cond[nz])
                 - np.minimum(mu[nz], cond[nz] * second_base[nz]))
        out = np.array([held, dot(first[nz], inner)])
    return out if step in ("traversal", "conditional") else out[::-1].copy()


def two_child_accepts(mu: np.ndarray, q: np.ndarray, step: str, *,
                      _terms: _LawTerms | None = None) -> np.ndarray:
    r"""Expected accepted mass ``(child 1, child 2)`` of ``step`` at a node with two leaf
    children drawn without replacement from ``q``, target :math:`\mu = s\,r` (closed forms of
    the module docstring; equal to :func:`enumerated_accepts`).

    The ratios are sorted over the support that matters only (tokens with :math:`\mu > q`
    for traversal, :math:`\mu > m_2` for reverse; the conditional steps reuse one order per
    node across scales), with the same floats as one full sort per step
    (:func:`_two_child_reference`, which it falls back to when tied ratios carry different
    terms).
    """
    if step not in STEPS:
        raise ValueError(f"step must be one of {STEPS}; got {step!r}")
    mu = np.asarray(mu, dtype=np.float64)
    terms = _LawTerms(np.asarray(q, dtype=np.float64)) if _terms is None else _terms
    family = "fwd" if step in ("traversal", "conditional") else "rev"
    first, cond, second_base = terms.terms(family)
    c_lo, c_hi = terms.c_range(family)
    n = mu.size
    if step in ("traversal", "reverse"):
        a1 = float(np.minimum(mu, first, out=_work("a", n)).sum())
        d = np.subtract(first, mu, out=_work("d", n))
        e = np.maximum(d, 0.0, out=_work("e", n))  # np.maximum: np.clip's values, ~10x faster
        r_mass = float(e.sum())
        a2 = 0.0
        if r_mass > 1e-15:
            # mu2 = (mu - first)_+ / R is positive only where d < 0 (mu - first is -d exactly)
            k = np.flatnonzero(d < 0)
            gk = np.maximum(mu[k] - first[k], 0.0) / r_mass
            hk = second_base[k]
            pos = (gk > 0) & (hk > 0)
            sup = _sorted_support(gk[pos], hk[pos], presorted=False)
            if sup is None:
                return _two_child_reference(mu, step, terms)
            # the reference's e[nz] and cond[nz], nz = where e > 0 (d > 0)
            gone = np.flatnonzero(~(d > 0))
            e_nz, c_nz = _drop(e, gone, "e_nz"), _drop(cond, gone, "c_nz")
            f = _sum_min_sorted(*sup[:3], c_nz, c_lo, c_hi, out=_work("f", e_nz.size))
            a2 = dot(e_nz, f)
        out = np.array([a1, a2])
    else:
        held = dot(first, mu)
        sup = terms.sorted_support(family, mu)
        if sup is None:
            return _two_child_reference(mu, step, terms)
        nz, first_nz, cond_nz, ch_nz = terms.held(family)
        m = cond_nz.size
        mu_nz = mu if nz is None else np.take(mu, nz, out=_work("mu_nz", m), mode="clip")
        f = _sum_min_sorted(*sup[:3], cond_nz, c_lo, c_hi, out=_work("f", m))
        inner = np.subtract(f, np.minimum(mu_nz, ch_nz, out=_work("a", m)), out=f)
        out = np.array([held, dot(first_nz, inner)])
    # reverse (x2 tried first) and condrev (x2 held) computed x2's mass first
    return out if family == "fwd" else out[::-1].copy()


def _accepts(mu: np.ndarray, q: np.ndarray, k: int, step: str,
             terms: _LawTerms | None = None) -> np.ndarray | None:
    """Expected accepted mass per position, or None where it is not computed exactly."""
    if k == 1:
        return np.array([float(np.minimum(mu, q).sum())])
    if k == 2:
        return two_child_accepts(mu, q, step, _terms=terms)
    if step in ("traversal", "conditional") and n_ordered_draws(q, k) <= ENUM_LIMIT:
        return enumerated_accepts(mu, q, k, step)
    return None


def step_value(view: NodeView, step: str, weights: np.ndarray, *,
               _terms: _LawTerms | None = None) -> float | None:
    r"""Expected accepted weight :math:`\sum_i w_i\,E[\text{mass accepted at child } i]` of
    ``step`` at ``view`` (children as leaves); None where it is not computed."""
    coin = step.startswith(COIN)
    inner = step[len(COIN):] if coin else step
    scale = 1.0 if coin else view.scale
    acc = _accepts(scale * view.target, view.proposal, view.n_children, inner, _terms)
    if acc is None:
        return None
    return (view.scale if coin else 1.0) * float(np.dot(weights, acc))


def candidate_steps(k: int) -> tuple[str, ...]:
    """The steps a chooser considers at a node with ``k`` children (traversal first)."""
    base = STEPS if k == 2 else ("traversal", "conditional") if k >= 3 else ("traversal",)
    return (*base, *(COIN + s for s in base))


def _no_step_can_switch(view: NodeView, weights: np.ndarray, q_sum: float) -> bool:
    r"""Whether no step can beat traversal by the switch margin, whatever the values.

    A step's expected accepted mass is at most the target mass :math:`s \sum r` (coin or not:
    a coin runs scale 1 with probability ``s``), so its value is at most
    :math:`\max_i w_i\, s \sum r`. Traversal's value is ``>= 0``, so a switch needs a value
    above ``TIE_TOL``; where twice the bound (for rounding) is below it, every step the argmax
    would compute loses to traversal. Deep nodes of a sampled tree are often visited with
    :math:`s < 10^{-30}`. Only for a proposal that sums to 1 (the closed forms' premise).
    """
    if abs(q_sum - 1.0) > 1e-6:
        return False
    bound = 2.0 * float(np.max(np.abs(weights))) * abs(view.scale) * \
        max(float(np.abs(view.target).sum()), 1.0)
    return bound < TIE_TOL


def _inclusion_bound(view: NodeView, weights: np.ndarray, terms: _LawTerms, coin: bool,
                     cache: dict) -> float:
    r"""An upper bound on the value of every two-child step at ``view`` (``coin``: of every
    coin step), rounding included.

    A lossless step accepts token :math:`y` with probability at most :math:`\mu(y)` (the
    emitted law is the target's) and at most :math:`\pi(y) = q(y) + m_2(y)`, the chance that
    one of the two draws is :math:`y`; so its accepted mass is at most
    :math:`B(\mu) = \sum_y \min(\mu(y), \pi(y))`, and a coin step's at most :math:`s\,B(r)`.
    The closed forms compute those masses from non-negative terms up to a relative
    ``~V eps`` (and an absolute ``~V eps`` of the target mass where the conditional forms
    subtract), far inside the slack added here, so a step whose bound is at most the switch
    threshold cannot be chosen and need not be computed.
    """
    if coin not in cache:
        pi = cache.get("pi")
        if pi is None:
            pi = cache["pi"] = terms.q + terms.reverse()[0]
        mu = view.target if coin else view.scale * view.target
        b = float(np.minimum(mu, pi).sum())
        m = float(np.abs(mu).sum())
        if coin:
            b, m = view.scale * b, view.scale * m
        cache[coin] = float(np.max(np.abs(weights))) * (b * (1.0 + 1e-8) + 1e-9 * m)
    return cache[coin]


def _argmax(view: NodeView, weights: np.ndarray, *, shortcuts: bool = True) -> str:
    """The best step at ``view`` by :func:`step_value` (traversal unless another is better by
    more than ``TIE_TOL``, relative). ``shortcuts`` skips what cannot change the choice: the
    whole node where the scale bounds every value below the margin
    (:func:`_no_step_can_switch`), and any two-child step whose inclusion bound
    (:func:`_inclusion_bound`) is at most the current threshold; False computes every step."""
    best_step = "traversal"
    q = np.asarray(view.proposal, dtype=np.float64)
    q_sum = float(q.sum())
    if shortcuts and _no_step_can_switch(view, weights, q_sum):
        return best_step
    terms = _LawTerms(q)  # shared by every step
    best = step_value(view, "traversal", weights, _terms=terms)
    if best is None:
        return "traversal"
    # the bound's premise: two draws from a law (q sums to 1)
    prune = shortcuts and view.n_children == 2 and abs(q_sum - 1.0) <= 1e-6
    bounds: dict = {}
    for step in candidate_steps(view.n_children)[1:]:
        coin = step.startswith(COIN)
        if coin and view.scale >= 1.0:
            continue  # a coin at scale 1 is the step itself
        threshold = best + TIE_TOL * (1.0 + abs(best))
        if prune and _inclusion_bound(view, weights, terms, coin, bounds) <= threshold:
            continue  # its value is at most the bound: it cannot pass the threshold
        val = step_value(view, step, weights, _terms=terms)
        if val is not None and val > threshold:
            best_step, best = step, val
    return best_step


def choose_safe(view: NodeView) -> str:
    """``univer``: the exact best step where all children are leaves, traversal elsewhere."""
    if not view.leaf_children or view.n_children < 2:
        return "traversal"
    return _argmax(view, np.ones(view.n_children))


def choose_guided(view: NodeView) -> str:
    """``univer-guided``: best expected accepted weight, weights = child subtree sizes."""
    if view.n_children < 2:
        return "traversal"
    return _argmax(view, np.asarray(view.child_sizes, dtype=np.float64))


def _fixed(step: str) -> Chooser:
    def choose(view: NodeView) -> str:
        return step
    choose.__name__ = f"always_{step}"
    return choose


#: Rule name -> chooser.
CHOOSERS: dict[str, Chooser] = {
    "traversal": _fixed("traversal"),
    "univer": choose_safe,
    "univer-guided": choose_guided,
    "univer-fixed": _fixed("conditional"),
}
