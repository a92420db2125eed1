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
Here:

1. A lower bound ``t`` on the ``B``-th best score is found cheaply: the "single deviations"
   (argmax tokens at every depth but the last) are valid tree nodes with scores
   ``P_d + log q_d(a)``; any ``t`` with at least ``B`` of them scoring ``>= t`` bounds the
   ``B``-th best score from below. A strided sample proposes ``t``; one pass over the array
   confirms it and collects, per depth, every token that can still appear in the tree
   (``log q_d(a) >= t - P_d``, where ``P_d`` is the best possible prefix score).
2. All prefixes scoring ``>= t`` are enumerated level by level with vectorised numpy
   (children of each frontier node are a prefix of that depth's sorted candidate list), raising
   ``t`` to the ``B``-th best score found so far after every level.
3. The survivors are sorted by the heap's key ``(-score, rank tuple)``: the heap pops nodes in
   exactly this order (every push has a larger key than its pop), so the first ``B`` are the
   reference's nodes, in the reference's pop order.

Scores are computed as ``score(parent) + log q_d(token)`` (a path's cumulative sum), so equal
paths tie exactly; the reference code computes a sibling's score as
``s - lp[r] + lp[r + 1]``, which can differ by an ulp and only matters for exact ties.
Ranks within a depth order tokens by decreasing log-probability, ties to the smaller token id
(``torch.topk``'s tie order is unspecified; this one is deterministic).
"""

from __future__ import annotations

import math

import numpy as np

from .. import compiled
from ..marginals import LazyLogMarginals, kth_largest, ranked_candidates
from ..paths import LogQ
from ..tree import DraftTree
from ..validation import (
    as_float_array,
    check_budget,
    check_log_q,
    check_root_token,
    kernel_check_args,
)

__all__ = ["build_nodes", "build_nodes_numpy", "ddtree", "ddtree_with_mask", "kth_largest",
           "ranked_candidates", "trusted_tree"]

#: Relative slack on score thresholds: candidate sets are supersets by this margin, so rounding
#: in ``P_d`` never drops a node that belongs to the tree.
_THRESHOLD_SLACK = 1e-9
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
    tried = type(log_q) is np.ndarray
    if tried:  # a raw array first: an isinstance check against the ABC costs microseconds
        fast = _ddtree_compiled(log_q, budget, root_token, check_sums)
        if fast is not None:
            return fast
    if isinstance(log_q, LazyLogMarginals) and log_q.shape[1] < _RANKED_MIN_VOCAB:
        log_q = log_q.dense()  # small V: one pass over the array is cheaper than ranking
    if isinstance(log_q, LazyLogMarginals):
        budget = check_budget(budget)
        root_token = check_root_token(root_token, vocab_size=log_q.shape[1])
        parent, token, depth = _build_ranked(log_q, budget)
        return trusted_tree(parent, token, depth, root_token)
    fast = None if tried else _ddtree_compiled(log_q, budget, root_token, check_sums)
    if fast is not None:
        return fast
    # clamp=False: no copy of the array for tiny positive rounding; the builder clamps the
    # candidate values it reads (build_nodes).
    lp, row_max = check_log_q(log_q, check_sums=check_sums, clamp=False)
    budget = check_budget(budget)
    root_token = check_root_token(root_token, vocab_size=lp.shape[1])
    parent, token, depth = build_nodes(lp, row_max, budget)
    return trusted_tree(parent, token, depth, root_token)


def ddtree_with_mask(log_q: LogQ, budget: int, *, root_token: int = -1
                     ) -> tuple[DraftTree, np.ndarray]:
    """:func:`ddtree` plus the tree's ancestor-only attention mask, bool ``(n+1, n+1)``."""
    tree = ddtree(log_q, budget, root_token=root_token)
    return tree, tree.attention_mask()


# ---------------------------------------------------------------------------- internals
def _ddtree_compiled(log_q: LogQ, budget, root_token, check_sums: bool) -> DraftTree | None:
    """:func:`ddtree` in one compiled pass over a raw array (check and build together), or
    ``None`` where the general path must run: no kernel, a strided or non-float input, an
    argument the general path will reject (its errors, in its order), or ``budget == 0``.

    The tree is built before the verdict on the rows is known and returned only if they pass;
    a row the kernel cannot pass clearly goes to :func:`check_log_q`, which raises its error or
    (a sum within the kernel's error margin of the tolerance) passes it.
    """
    kernel = compiled.kernel
    if (kernel is None or type(budget) is not int or budget < 1
            or type(root_token) is not int or root_token < -1):
        return None
    if isinstance(log_q, np.ndarray):
        lp = log_q
        source = _FLOAT_NAMES.get(lp.dtype)
    elif type(log_q).__module__.split(".")[0] == "torch":
        lp, source = as_float_array(log_q, "log_q")  # a view of a CPU float32/64 tensor
    else:
        return None
    if (source is None or lp.ndim != 2 or lp.size == 0 or not lp.flags.c_contiguous
            or root_token >= lp.shape[1]):
        return None
    clear, nodes = kernel.ddtree_dense(lp, budget, check_sums, *kernel_check_args(source),
                                       root_token)
    if not clear:
        check_log_q(lp, check_sums=check_sums, clamp=False)  # raises, or passes a margin row
    # one bytes object, parent/token/depth one after the other, root token set: one read-only
    # array and three row views of it (each numpy call costs microseconds when caches are cold)
    return DraftTree(*np.frombuffer(nodes, dtype=np.int64).reshape(3, -1))


_FLOAT_NAMES = {np.dtype(np.float32): "float32", np.dtype(np.float64): "float64"}


def trusted_tree(parent: np.ndarray, token: np.ndarray, depth: np.ndarray, root_token: int
                 ) -> DraftTree:
    """A :class:`DraftTree` from arrays a builder already knows to be valid (no checks: the
    builders' hot path; a prefix of a best-first tree is one)."""
    token[0] = root_token
    for a in (parent, token, depth):
        a.flags.writeable = False
    return DraftTree(parent, token, depth)


def build_nodes(lp: np.ndarray, row_max: np.ndarray, budget: int
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """DDTree's ``(parent, token, depth)`` arrays on checked log-marginals ``lp`` (L, V).

    ``lp`` may hold entries in ``(0, LOGPROB_POSITIVE_TOL]`` (``check_log_q(clamp=False)``):
    every value read is clamped to 0, so the tree is the one of the clamped array.
    ``row_max`` must be clamped already; ``budget >= 1``.

    Runs the compiled kernel (:mod:`treespec_sim.compiled`) on a C-contiguous float32/float64
    array, :func:`build_nodes_numpy` otherwise; both give the same arrays
    (tests/sim/test_ckernel.py).
    """
    kernel = compiled.kernel
    if kernel is not None and lp.dtype in (np.float32, np.float64) and lp.flags.c_contiguous:
        nodes = kernel.ddtree_dense(lp, budget, False, 0.0, 0.0, np.inf)[1]
        return tuple(np.frombuffer(bytearray(nodes), dtype=np.int64).reshape(3, -1))  # writable
    return build_nodes_numpy(lp, row_max, budget)


def build_nodes_numpy(lp: np.ndarray, row_max: np.ndarray, budget: int
                      ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`build_nodes` in numpy (the path where no compiled kernel was built)."""
    _L, V = lp.shape
    k = min(budget, V)
    # Best possible score of a depth-d prefix's ancestors: P[d] = sum of maxima above depth d.
    prefix_best = np.concatenate([[0.0], np.cumsum(row_max)[:-1]])
    t = _initial_threshold(lp, prefix_best, budget, k)
    cand_tok, cand_val, t = _candidates(lp, prefix_best, t, budget, k)
    return _enumerate_top(cand_tok, cand_val, budget, t)


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
    and the pops redone, until none does; the tree is then the one over the full lists
    (``docs/performance.md``, "The ranked builder"). On calibrated worlds the tree rarely
    needs more than a dozen tokens of any row, even at ``B = 1024``.
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
        slack = _slack(t)
        short = [d for d in range(L)
                 if asked[d] < k and vals[d][-1] >= t - prefix_best[d] - slack]
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
    """DDTree's best-first pops over per-depth ranked lists (the compiled kernel's, or
    :func:`_enumerate_top`'s: the same nodes in the same order), and the last pop's score
    (the lowest: pops come in non-increasing score order), its values summed from the root as
    the builders sum them. ``flat``: the lists already concatenated,
    ``(values, tokens, offsets)``."""
    kernel = compiled.kernel
    if kernel is not None:
        if flat is None:
            offsets = np.zeros(len(vals) + 1, dtype=np.int64)
            np.cumsum([v.size for v in vals], out=offsets[1:])
            flat = (np.concatenate(vals), np.concatenate(toks), offsets)
        fv, ft, offsets = flat
        raw, last = kernel.ranked_tree(fv.astype(np.float64, copy=False),
                                       ft.astype(np.int64, copy=False), offsets, budget)
        # one writable array, three row views (parent, token, depth)
        parent, token, depth = np.frombuffer(raw, dtype=np.int64).reshape(3, -1)
        return (parent, token, depth), last
    nodes = _enumerate_top(toks, vals, budget, -math.inf)
    return nodes, _last_score(nodes, toks, vals)


def _last_score(nodes: tuple[np.ndarray, np.ndarray, np.ndarray], toks: list[np.ndarray],
                vals: list[np.ndarray]) -> float:
    """The score of the last node, summed root to leaf as the builders sum it."""
    parent, token, depth = (a.tolist() for a in nodes)
    path = []
    i = len(parent) - 1
    while i > 0:
        path.append(i)
        i = parent[i]
    score = 0.0
    for i in reversed(path):  # a path's tokens are at distinct depths: one lookup per row
        d = depth[i] - 1
        score += float(vals[d][toks[d].tolist().index(token[i])])
    return score


def _slack(t: float) -> float:
    return _THRESHOLD_SLACK * (1.0 + abs(t)) if math.isfinite(t) else 0.0


def _initial_threshold(lp: np.ndarray, prefix_best: np.ndarray, budget: int, k: int) -> float:
    """A (probable) lower bound on the B-th best score, from a strided sample of the array.

    The bound is confirmed (and lowered if needed) by :func:`_candidates`.
    """
    L, V = lp.shape
    if L * k < budget:
        return -math.inf  # too few single deviations to certify any bound
    # Aim for ~2x oversampling of the needed rank in a sample of about 2048 + 64 B entries.
    stride = max(1, (L * V) // (1024 + 16 * budget))
    sample = np.minimum(lp[:, ::stride], 0.0, dtype=np.float64) + prefix_best[:, None]
    flat = sample.ravel()
    rank = min(flat.size, 2 * math.ceil(budget / stride) + 8)
    if rank >= flat.size:
        return -math.inf
    return float(np.partition(flat, flat.size - rank)[flat.size - rank])


def _candidates(lp: np.ndarray, prefix_best: np.ndarray, t: float, budget: int, k: int
                ) -> tuple[list[np.ndarray], list[np.ndarray], float]:
    """Per-depth ranked candidate lists, and a certified threshold (lowered until valid)."""
    L, _ = lp.shape
    while True:
        slack = _slack(t)
        toks, vals = [], []
        count = 0
        for d in range(L):
            thr = t - prefix_best[d] - slack  # < 0: clamping never changes the candidate set
            tok, val = ranked_candidates(lp[d], thr, k)
            if val.size and val[0] > 0:
                # Positive rounding: the clamped row's order differs only if two candidates
                # clamp to 0 (a tie broken by token id); then rank the clamped row.
                val = np.minimum(val, 0.0)
                if val.size > 1 and val[1] >= 0:
                    tok, val = ranked_candidates(np.minimum(lp[d], 0.0), thr, k)
            toks.append(tok)
            vals.append(val)
            count += tok.size
        # `count` single-deviation nodes score >= t: enough to certify t, or t = -inf (all).
        if count >= budget or not math.isfinite(t):
            return toks, vals, t
        t = -math.inf if count == 0 else t - max(16.0, abs(t))


def _enumerate_top(cand_tok: list[np.ndarray], cand_val: list[np.ndarray], budget: int,
                   t: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Enumerate prefixes scoring >= t level by level; return the first B in heap-key order."""
    L = len(cand_tok)
    # Per level: scores, parent (index into the previous level's arrays), rank.
    level_scores: list[np.ndarray] = []
    level_parent: list[np.ndarray] = []
    level_rank: list[np.ndarray] = []
    kept_scores: list[np.ndarray] = []  # every enumerated score, for the running B-th best
    frontier_scores = np.zeros(1)  # the root
    expandable = np.ones(1, dtype=bool)
    n_total = 0
    for d in range(L):
        vals = cand_val[d]
        if not expandable.any() or vals.size == 0:
            break
        neg_vals = -vals  # ascending, for searchsorted
        n_children = _child_counts(frontier_scores, expandable, neg_vals, t)
        total = int(n_children.sum())
        if total > 8 * budget + 64 and n_total + total > budget:
            t = _raise_threshold(frontier_scores[expandable], neg_vals, t, budget)
            n_children = _child_counts(frontier_scores, expandable, neg_vals, t)
            total = int(n_children.sum())
        if total > 8 * budget + 64:
            # The threshold could not cut this level: ties at t (or t = -inf, when too few
            # finite-score prefixes exist). Keep the level's first B nodes in heap-key order;
            # every other node has B same-level nodes ahead of it, and its descendants follow it.
            # Streamed, never materialised: a tie plateau can hold F x K children (2^30 for a
            # B = 10^6 tree over V = 32768), and memory must grow with the tree.
            scores, parents, ranks = _first_in_level_streamed(
                frontier_scores, n_children, neg_vals, vals, level_parent, level_rank, budget)
            total = scores.size
        else:
            parents, ranks, scores = _children(frontier_scores, n_children, vals)
        level_scores.append(scores)
        level_parent.append(parents)
        level_rank.append(ranks)
        kept_scores.append(scores)
        n_total += total
        n_kept = sum(s.size for s in kept_scores)
        if n_kept > 2 * budget:  # amortise: prune when the kept set doubles
            # The B-th best score so far is a certified lower bound (B distinct valid nodes).
            everything = np.concatenate(kept_scores)
            t = max(t, float(np.partition(everything, n_kept - budget)[n_kept - budget]))
            kept_scores = [everything[everything >= t - _slack(t)]]
        # Children of nodes below t can never score >= t (scores are cumulative sums of
        # non-positive values): keep such nodes, but do not expand them.
        frontier_scores = scores
        expandable = scores >= t - _slack(t)

    return _select(level_scores, level_parent, level_rank, cand_tok, budget, t)


def _children(frontier_scores: np.ndarray, n_children: np.ndarray, vals: np.ndarray,
              subset: np.ndarray | None = None
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(parent, rank, score)`` of the first ``n_children[i]`` children of frontier node
    ``subset[i]`` (default: every node), in (parent, rank) order."""
    ids = np.arange(frontier_scores.size) if subset is None else subset
    total = int(n_children.sum())
    parents = np.repeat(ids, n_children)
    starts = np.cumsum(n_children) - n_children
    ranks = np.arange(total) - np.repeat(starts, n_children)
    return parents, ranks, frontier_scores[parents] + vals[ranks]


def _rank_tuples_of(nodes: np.ndarray, level_parent: list[np.ndarray],
                    level_rank: list[np.ndarray]) -> np.ndarray:
    """Rank tuples (int64 ``(len(nodes), depth)``) of nodes of the last enumerated level."""
    depth = len(level_rank)
    tuples = np.empty((nodes.size, depth), dtype=np.int64)
    idx = nodes
    for lev in range(depth - 1, -1, -1):
        tuples[:, lev] = level_rank[lev][idx]
        if lev > 0:
            idx = level_parent[lev][idx]
    return tuples


def _first_in_level_streamed(frontier_scores: np.ndarray, n_children: np.ndarray,
                             neg_vals: np.ndarray, vals: np.ndarray,
                             level_parent: list[np.ndarray], level_rank: list[np.ndarray],
                             budget: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A level's ``budget`` first nodes by the heap key (-score, rank tuple), in (parent,
    rank) order, generated in chunks of at most ``~4 B`` children.

    Parents are visited in rank-tuple order, so once ``B`` nodes are kept with lowest score
    ``s``, a later parent's child scoring exactly ``s`` has a larger rank tuple than every kept
    node at ``s`` and cannot enter: later parents generate only children scoring above ``s``.
    """
    n_front = frontier_scores.size
    parent_tuples = (_rank_tuples_of(np.arange(n_front), level_parent, level_rank)
                     if level_rank else np.zeros((n_front, 0), dtype=np.int64))
    order = np.lexsort([parent_tuples[:, c] for c in range(parent_tuples.shape[1] - 1, -1, -1)]
                       + [np.zeros(n_front, dtype=np.int64)])
    order = order[n_children[order] > 0]
    counts = n_children[order]
    chunk_cap = 4 * budget + 64
    k_scores = np.empty(0)
    k_parents = np.empty(0, dtype=np.int64)
    k_ranks = np.empty(0, dtype=np.int64)
    pos = 0
    while pos < order.size:
        # the next parents whose children fit in one chunk (at least one parent: <= K <= B)
        csum = np.cumsum(counts[pos:])
        end = pos + max(1, int(np.searchsorted(csum, chunk_cap, side="right")))
        par, rnk, sc = _children(frontier_scores, counts[pos:end], vals, order[pos:end])
        sc_all = np.concatenate([k_scores, sc])
        par_all = np.concatenate([k_parents, par])
        rnk_all = np.concatenate([k_ranks, rnk])
        tup = parent_tuples[par_all]
        keys = ([rnk_all] + [tup[:, c] for c in range(tup.shape[1] - 1, -1, -1)]
                + [-sc_all])
        best = np.lexsort(keys)[:budget]
        k_scores, k_parents, k_ranks = sc_all[best], par_all[best], rnk_all[best]
        pos = end
        if k_scores.size == budget and pos < order.size:
            # later parents: only children scoring strictly above the kept minimum
            floor = float(k_scores.min())
            rest_scores = frontier_scores[order[pos:]]
            with np.errstate(invalid="ignore"):  # -inf - -inf: such parents get 0 below
                above = np.searchsorted(neg_vals, rest_scores - floor, side="left")
            above[~np.isfinite(rest_scores)] = 0  # a -inf parent's children beat nothing
            counts = counts.copy()
            counts[pos:] = np.minimum(counts[pos:], above)
    keep = np.lexsort([k_ranks, k_parents])
    return k_scores[keep], k_parents[keep], k_ranks[keep]


def _child_counts(frontier_scores: np.ndarray, expandable: np.ndarray, neg_vals: np.ndarray,
                  t: float) -> np.ndarray:
    """Number of candidates ``r`` (a prefix of the ranked list) with score + val[r] >= t."""
    if not math.isfinite(t):
        return np.where(expandable, neg_vals.size, 0)
    counts = np.searchsorted(neg_vals, frontier_scores - (t - _slack(t)), side="right")
    return np.where(expandable, counts, 0)


def _raise_threshold(parent_scores: np.ndarray, neg_vals: np.ndarray, t: float,
                     budget: int) -> float:
    """Bisect a higher threshold so that a level generates between B and ~4B children.

    Any t' with at least B children scoring >= t' is a certified bound; this keeps a loose
    initial bound from exploding the next level.
    """
    finite = parent_scores[np.isfinite(parent_scores)]
    if finite.size == 0 or not np.isfinite(neg_vals[0]):
        return t

    def count(thr: float) -> int:
        return int(np.searchsorted(neg_vals, finite - thr, side="right").sum())

    lo, hi = t, float(finite.max() - neg_vals[0])  # hi: the best child score
    if not math.isfinite(lo):
        lo = hi - 1e3
        if count(lo) < budget:
            return t
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        c = count(mid)
        if c >= budget:
            lo = mid
            if c <= 4 * budget:
                break
        else:
            hi = mid
    return lo


def _select(level_scores, level_parent, level_rank, cand_tok, budget, t):
    sizes = [s.size for s in level_scores]
    offsets = np.concatenate([[0], np.cumsum(sizes)])
    scores = np.concatenate(level_scores)
    depth = np.repeat(np.arange(1, len(sizes) + 1), sizes)
    # Global index of each node's parent (-1 = root).
    parent_global = np.concatenate(
        [np.full(sizes[0], -1, dtype=np.int64)]
        + [level_parent[d] + offsets[d - 1] for d in range(1, len(sizes))])
    rank = np.concatenate(level_rank)

    keep = np.flatnonzero(scores >= t - _slack(t))
    order = keep[np.argsort(-scores[keep], kind="stable")]
    b = min(budget, order.size)
    s_sorted = scores[order]
    # Exact score ties within reach of the cut are broken by the rank tuple (heap key).
    if b > 0 and np.any(s_sorted[1:] == s_sorted[:-1]):
        ranks = _rank_tuples(parent_global, rank, depth, len(sizes))
        keys = [ranks[order, c] for c in range(ranks.shape[1] - 1, -1, -1)] + [-s_sorted]
        order = order[np.lexsort(keys)]
    chosen = order[:b]

    node_id = np.full(scores.size + 1, -1, dtype=np.int64)  # last slot maps the root (-1)
    node_id[-1] = 0
    node_id[chosen] = np.arange(1, b + 1)
    parent = np.empty(b + 1, dtype=np.int64)
    parent[0] = -1
    parent[1:] = node_id[parent_global[chosen]]
    if np.any(parent[1:] < 0):  # pragma: no cover - would mean the key order was violated
        raise AssertionError("ddtree: a selected node's parent was not selected")
    token = np.empty(b + 1, dtype=np.int64)
    token[0] = -1
    dep = np.zeros(b + 1, dtype=np.int64)
    dep[1:] = depth[chosen]
    token[1:] = _tokens(cand_tok, depth[chosen], rank[chosen])
    return parent, token, dep


def _tokens(cand_tok, depth, rank):
    out = np.empty(depth.size, dtype=np.int64)
    for d in np.unique(depth):
        sel = depth == d
        out[sel] = cand_tok[d - 1][rank[sel]]
    return out


def _rank_tuples(parent_global, rank, depth, n_levels):
    """Rank tuples padded with -1 (a prefix sorts before its extensions), shape (N, L)."""
    n = rank.size
    out = np.full((n, n_levels), -1, dtype=np.int64)
    for d in range(1, n_levels + 1):
        sel = np.flatnonzero(depth == d)
        if d > 1:
            out[sel] = out[parent_global[sel]]
        out[sel, d - 1] = rank[sel]
    return out
