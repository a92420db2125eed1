r"""DDTree: the best-first draft tree over per-depth drafter marginals.

Reproduces Algorithm 1 of Ringel & Romano, *Accelerating Speculative Decoding with Block
Diffusion Draft Trees* (DDTree, arXiv 2604.12989), as implemented in ``ddtree.py`` of the
reference code: the tree holds the ``B`` prefixes with the highest surrogate score

.. math:: \log q(u) = \sum_{i=1}^{|u|} \log q_i(u_i),

with ties broken towards the lexicographically smaller tuple of per-depth ranks, and node
index = pop order of the reference heap.

How this implementation differs from the reference's *shape* (not its output)
-------------------------------------------------------------------------------
The reference extracts the top-``K`` tokens of every depth (``K = min(B, V)``) and then pops
``B`` times from a Python heap. Both steps cost far more than reading the ``(L, V)`` array once.
Here one compiled pass over the array (:mod:`treespec_sim.policies._dense`) keeps, per depth,
only the entries that can still be in the tree under a certified lower bound on the ``B``-th
best score, and forms the rows' masses for the input check on the way; the nodes scoring above
the bound are enumerated and sorted stably by score -- the heap's key order ``(-score, rank
tuple)`` -- so the first ``B`` are the reference's nodes, in the reference's pop order. Lazy
marginals are read through short ranked lists instead (:func:`_build_ranked`).

Scores are computed as ``score(parent) + log q_d(token)`` (a path's cumulative sum), so equal
paths tie exactly; the reference code computes a sibling's score as
``s - lp[r] + lp[r + 1]``, which can differ by an ulp and only matters for exact ties.
Ranks within a depth order tokens by decreasing log-probability, ties to the smaller token id
(``torch.topk``'s tie order is unspecified; this one is deterministic).
"""

from __future__ import annotations

import math

import numpy as np

from ..marginals import LazyLogMarginals, kth_largest, ranked_candidates
from ..paths import LogQ
from ..tree import DraftTree
from ..validation import (
    as_float_array,
    check_budget,
    check_log_q,
    check_log_q_shape,
    check_masses,
    check_root_token,
    checked_row_max,
    row_sum_tolerance,
)
from ._dense import dense_tree, ranked_tree, slack

__all__ = ["build_nodes", "ddtree", "ddtree_with_mask", "kth_largest", "ranked_candidates",
           "trusted_tree"]

#: Below this vocabulary size a LazyLogMarginals is materialised and read as an array: the
#: per-row ranking overhead exceeds one pass over (L, V) (benchmarks/bench_sweep.py).
_RANKED_MIN_VOCAB = 4096


def ddtree(log_q: LogQ, budget: int, *, root_token: int = -1, check_sums: bool = True) -> DraftTree:
    r"""The DDTree draft tree: the ``budget`` best prefixes under the factorised surrogate.

    Parameters
    ----------
    log_q : array_like of float, shape (L, V), or LazyLogMarginals
        Drafter log-probabilities at depths ``1..L`` (numpy, list or torch, any float dtype:
        :mod:`treespec_sim.validation`; ``-inf`` allowed). Every row must sum to 1 in
        probability (logits are refused, not silently ranked); rows are used as given. A
        :class:`~treespec_sim.marginals.LazyLogMarginals` is read through its per-depth top-``K``
        lists only (``K = min(B, V)``), without materialising it -- except below
        ``V = 4096``, where one pass over the dense array is cheaper; the tree is the same.
    budget : int
        ``B >= 1``, the number of non-root nodes (a Python or numpy integer; bools, floats
        and strings are refused: :func:`~treespec_sim.validation.check_budget`). If fewer
        than ``B`` prefixes exist, all of them are returned.
    root_token : int, optional
        Token stored at the root (the last committed token), ``-1 <= root_token < V``; ``-1``
        if unknown.
    check_sums : bool, default True
        ``False`` builds on any non-positive scores without checking that rows are
        distributions (e.g. truncated rows in tests of the builder itself).

    Returns
    -------
    DraftTree
        Node ``i`` is the ``i``-th pop of DDTree's heap; ``tree.size == min(B, #prefixes)``.

    Notes
    -----
    The tree maximises the surrogate expected acceptance :math:`\sum_{u\in T} q(u)`
    (DDTree Prop. 1-3). It is prefix-closed because :math:`q(u_{1:d+1}) \le q(u_{1:d})`.

    Raises
    ------
    ValueError
        Bad ``log_q`` (shape, NaN, positive entries), a ``budget`` that is not a positive
        integer, a bad ``root_token``.
    """
    if isinstance(log_q, LazyLogMarginals):
        if log_q.shape[1] < _RANKED_MIN_VOCAB:
            log_q = log_q.dense()  # small V: one pass over the array is cheaper than ranking
        else:
            budget = check_budget(budget)
            root_token = check_root_token(root_token, vocab_size=log_q.shape[1])
            parent, token, depth = _build_ranked(log_q, budget)
            return trusted_tree(parent, token, depth, root_token)
    if type(budget) is int and budget >= 1 and type(root_token) is int and root_token >= -1:
        # the check and the build in one pass: the builder forms the rows' maxima and masses as
        # it reads them; a row it flags is checked exactly before the tree is returned (the
        # same errors, in the same order)
        lp, source = as_float_array(log_q, "log_q")
        check_log_q_shape(lp, "log_q")
        if not check_sums:
            checked_row_max(lp, "log_q")  # without masses, a NaN may not show in the maxima
        lp = np.ascontiguousarray(lp)
        nodes, mass, info = dense_tree(lp, budget, row_sum_tolerance(source) if check_sums
                                       else -1.0, -1)
        if info[3]:
            checked_row_max(lp, "log_q")
        if info[4]:
            check_masses(lp, mass, source, "log_q")
        root_token = check_root_token(root_token, vocab_size=lp.shape[1])
        nodes[1, 0] = root_token
        nodes.flags.writeable = False
        return DraftTree(*nodes)
    # clamp=False: no copy of the array for tiny positive rounding; the builder clamps the
    # values it reads.
    lp, _ = check_log_q(log_q, check_sums=check_sums, clamp=False)
    budget = check_budget(budget)
    root_token = check_root_token(root_token, vocab_size=lp.shape[1])
    parent, token, depth = build_nodes(lp, budget)
    return trusted_tree(parent, token, depth, root_token)


def ddtree_with_mask(log_q: LogQ, budget: int, *, root_token: int = -1
                     ) -> tuple[DraftTree, np.ndarray]:
    """:func:`ddtree` plus the tree's ancestor-only attention mask, bool ``(n+1, n+1)``."""
    tree = ddtree(log_q, budget, root_token=root_token)
    return tree, tree.attention_mask()


# ---------------------------------------------------------------------------- internals
def trusted_tree(parent: np.ndarray, token: np.ndarray, depth: np.ndarray, root_token: int
                 ) -> DraftTree:
    """A :class:`DraftTree` from arrays a builder already knows to be valid (no checks: the
    builders' hot path; a prefix of a best-first tree is one)."""
    token[0] = root_token
    for a in (parent, token, depth):
        a.flags.writeable = False
    return DraftTree(parent, token, depth)


def build_nodes(lp: np.ndarray, budget: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DDTree's ``(parent, token, depth)`` arrays (writable, root token -1) on checked
    log-marginals ``lp`` (L, V), float32 or float64.

    ``lp`` may hold entries in ``(0, LOGPROB_POSITIVE_TOL]`` (``check_log_q(clamp=False)``):
    every value read is clamped to 0, so the tree is the one of the clamped array. ``budget >=
    1``.
    """
    nodes, _, _ = dense_tree(np.ascontiguousarray(lp), budget, -1.0, -1)
    return nodes[0], nodes[1], nodes[2]


def _build_ranked(log_q: LazyLogMarginals, budget: int
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`build_nodes` from per-depth ranked lists, as long as the tree needs (at most
    ``K = min(B, V)`` per depth, as the reference reads).

    A token ranked below ``K`` at its depth can never enter the tree: the ``K`` siblings ranked
    above it under the same parent all precede it in heap order. Shorter lists usually do:
    the best-first pops over the first ``k`` entries of every row are ``B`` real prefixes,
    so the last one's score ``t`` bounds the ``B``-th best score from below, and a row whose
    ``k``-th value is below ``t - P_d`` (``P_d`` the best score of a depth-``d`` parent) holds
    no further token of the tree. Rows that fail the test are read further (4x longer lists)
    and the pops redone, until none does; the tree is then the one over the full lists. On
    calibrated worlds the tree rarely needs more than a dozen tokens of any row, even at
    ``B = 1024``.
    """
    L, V = log_q.shape
    k = min(budget, V)
    k0 = min(k, _FIRST_LIST)
    toks0, vals0 = log_q.top_block(k0)   # every row's first k0: (L, k0) each
    if np.isnan(vals0).any() or not np.isfinite(vals0[:, 0]).all():
        for d, v in enumerate(vals0):
            if np.isnan(v).any():
                raise ValueError(f"log_q[{d}] has NaN entries or no entry at all")
            if not np.isfinite(v[0]):
                raise ValueError(f"log_q[{d}] has no finite entry (zero total probability)")
    # Clamp rounding above 0, as check_log_q does for arrays (paths must never gain score).
    np.minimum(vals0, 0.0, out=vals0)
    flat, flat_toks = vals0.ravel(), toks0.ravel()
    offsets = np.arange(0, (L + 1) * k0, k0, dtype=np.int64)
    row_max = vals0[:, 0]
    prefix_best = np.concatenate([[0.0], np.cumsum(row_max)[:-1]])
    asked = [k0] * L
    toks: list[np.ndarray] = list(toks0)
    vals: list[np.ndarray] = list(vals0)
    while True:
        nodes, last = _pops(toks, vals, budget, flat=(flat, flat_toks, offsets))
        t = last if nodes[0].size > budget else -math.inf
        sl = slack(t)
        short = [d for d in range(L)
                 if asked[d] < k and vals[d][-1] >= t - prefix_best[d] - sl]
        if not short:
            return nodes
        for d in short:
            asked[d] = min(k, 4 * asked[d])
            toks[d], v = log_q.top(d, asked[d])
            vals[d] = np.minimum(v, 0.0)
        flat, flat_toks = np.concatenate(vals), np.concatenate(toks)
        np.cumsum([v.size for v in vals], out=offsets[1:])


#: The first list length per depth of :func:`_build_ranked` (longer where the tree needs it).
_FIRST_LIST = 16


def _pops(toks: list[np.ndarray], vals: list[np.ndarray], budget: int, *,
          flat: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None
          ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], float]:
    """DDTree's pops over per-depth ranked lists (:func:`~._dense.ranked_tree`) and the last
    pop's score (the lowest: pops come in non-increasing score order), its values summed from
    the root. ``flat``: the lists already concatenated, ``(values, tokens, offsets)``."""
    if flat is None:
        offsets = np.zeros(len(vals) + 1, dtype=np.int64)
        np.cumsum([v.size for v in vals], out=offsets[1:])
        flat = (np.concatenate(vals), np.concatenate(toks), offsets)
    fv, ft, offsets = flat
    nodes, last = ranked_tree(fv.astype(np.float64, copy=False), ft.astype(np.int64, copy=False),
                              offsets, budget)
    return tuple(nodes), last
