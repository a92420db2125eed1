"""Independent reference implementations used to cross-check the fast paths.

These are deliberately plain: a per-node Python ``heapq`` DDTree builder written the way the
DDTree reference code is (top-K extraction per depth, then best-first pops pushing the next
sibling and the first child), and an exhaustive enumeration of all prefixes. Neither shares
code with :func:`treespec_sim.policies.ddtree`.
"""

from __future__ import annotations

import heapq
import itertools

import numpy as np

__all__ = ["brute_force_top_prefixes", "ddtree_heap_reference", "ddtree_torch_reference",
           "rank_order"]


def rank_order(row: np.ndarray) -> np.ndarray:
    """Token ids of ``row`` sorted best first; ties to the smaller id."""
    return np.lexsort((np.arange(row.size), -row.astype(np.float64)))


def ddtree_heap_reference(log_q: np.ndarray, budget: int
                          ) -> tuple[list[int], list[int], list[int], np.ndarray]:
    """DDTree's Algorithm 1 with a Python heap, plus the ancestor-only mask.

    Returns ``(parent, token, depth, mask)`` with the root at index 0 (token -1).
    Scores are cumulative sums ``score(parent) + lp[d, r]`` (see the fast builder's notes).
    """
    lp = np.asarray(log_q, dtype=np.float64)
    L, V = lp.shape
    k = min(budget, V)
    parent, token, depth = [-1], [-1], [0]
    if budget == 0:
        return parent, token, depth, np.ones((1, 1), dtype=bool)
    # Top-K per depth (argpartition, then sort the K), ties to the smaller token id.
    if k < V:
        kth = -np.partition(-lp, k - 1, axis=1)[:, k - 1]
        top_tok = np.empty((L, k), dtype=np.int64)
        for d in range(L):
            # Boundary ties: argpartition may pick any; rebuild with the smallest ids.
            row = lp[d]
            above = np.flatnonzero(row > kth[d])
            ties = np.flatnonzero(row == kth[d])[: k - above.size]
            ids = np.concatenate([above, ties])
            top_tok[d] = ids[np.lexsort((ids, -row[ids]))]
    else:
        top_tok = np.stack([rank_order(lp[d]) for d in range(L)])
    top_lp = np.take_along_axis(lp, top_tok, axis=1).tolist()
    return _best_first(top_lp, top_tok.tolist(), L, k, budget)


def ddtree_torch_reference(log_q, budget: int
                           ) -> tuple[list[int], list[int], list[int], np.ndarray]:
    """DDTree's own builder, as its public code (liranringel/ddtree) runs it: float32 marginals,
    ``torch.topk`` with ``K = min(B, V)`` per depth, best-first pops from a Python ``heapq``
    (the popped node pushes its next sibling and its first child), then the ancestor-only mask.

    The timing baseline of ``benchmarks/bench_ddtree.py`` (written from the paper's
    Algorithm 1 and the reference's structure, not copied). ``torch.topk``'s tie order is
    unspecified, so trees equal the package's only on inputs without ties inside the top K.
    Returns ``(parent, token, depth, mask)`` with the root at index 0 (token -1).
    """
    import torch  # heavy and optional: imported only by this baseline

    lp = torch.as_tensor(log_q).float()
    L, V = lp.shape
    k = min(budget, V)
    parent, token, depth = [-1], [-1], [0]
    if budget == 0:
        return parent, token, depth, np.ones((1, 1), dtype=bool)
    top_lp, top_tok = torch.topk(lp, k, dim=-1)
    return _best_first(top_lp.tolist(), top_tok.tolist(), L, k, budget)


def _best_first(top_lp: list, top_tok: list, L: int, k: int, budget: int
                ) -> tuple[list[int], list[int], list[int], np.ndarray]:
    """DDTree's pops over per-depth top-``k`` lists (a popped node pushes its next sibling and
    its first child), then the ancestor-only mask (built with numpy rows)."""
    parent, token, depth = [-1], [-1], [0]
    # Heap entries: (-score, rank tuple, parent node, depth, rank, parent score).
    heap = [(-top_lp[0][0], (0,), 0, 1, 0, 0.0)]
    while heap and len(parent) <= budget:
        neg_s, ranks, par, d, r, par_score = heapq.heappop(heap)
        s = -neg_s
        node = len(parent)
        parent.append(par)
        token.append(top_tok[d - 1][r])
        depth.append(d)
        if r + 1 < k:
            heapq.heappush(heap, (-(par_score + top_lp[d - 1][r + 1]), (*ranks[:-1], r + 1),
                                  par, d, r + 1, par_score))
        if d < L:
            heapq.heappush(heap, (-(s + top_lp[d][0]), (*ranks, 0), node, d + 1, 0, s))
    n1 = len(parent)
    mask = np.zeros((n1, n1), dtype=bool)
    mask[0, 0] = True
    for i in range(1, n1):
        mask[i] = mask[parent[i]]
        mask[i, i] = True
    return parent, token, depth, mask


def brute_force_top_prefixes(log_q: np.ndarray, budget: int) -> list[tuple[int, ...]]:
    """The ``budget`` best token prefixes by exhaustive enumeration (tiny L, V only).

    Order: decreasing cumulative score, ties to the lexicographically smaller rank tuple
    (shorter prefix first), which is DDTree's heap order.
    """
    lp = np.asarray(log_q, dtype=np.float64)
    L, V = lp.shape
    ranks_of = [np.argsort(rank_order(lp[d])) for d in range(L)]  # token -> rank
    entries = []
    for length in range(1, L + 1):
        for path in itertools.product(range(V), repeat=length):
            s = 0.0
            for d, a in enumerate(path):
                s = s + lp[d, a]
            rank_tuple = tuple(int(ranks_of[d][a]) for d, a in enumerate(path))
            entries.append((-s, rank_tuple, path))
    entries.sort()
    return [p for _, _, p in entries[:budget]]


def caddtree_heap_reference(log_q: np.ndarray, draft_cost: float, verify_cost,
                            max_budget: int) -> tuple[list[int], list[int]]:
    """CaDDTree as its reference code runs it: DDTree's heap with the stop test inline.

    Before inserting each popped node, ``theta_new = (1 + Phi + exp(s)) / (Cd + Cv(n + 1))``
    (``n`` nodes after insertion, plus the root) is compared with ``theta_prev``; the build stops
    on ``theta_new <= theta_prev``. Written independently of the package's vectorised
    ``caddtree`` (which builds ``ddtree(max_budget)`` and scans a theta array), so the two
    cross-check each other. Returns ``(parent, token)`` with the root at index 0 (token -1).
    """
    lp = np.asarray(log_q, dtype=np.float64)
    L, V = lp.shape
    k = min(max_budget, V)
    parent, token = [-1], [-1]
    if max_budget == 0:
        return parent, token
    top_tok = np.stack([rank_order(lp[d])[:k] for d in range(L)])
    top_lp = np.take_along_axis(lp, top_tok, axis=1)
    phi = 0.0
    theta_prev = 1.0 / (draft_cost + float(verify_cost(1)))
    heap = [(-top_lp[0][0], (0,), 0, 1, 0, 0.0)]
    while heap and len(parent) <= max_budget:
        neg_s, ranks, par, d, r, par_score = heapq.heappop(heap)
        s = -neg_s
        delta = float(np.exp(s))
        theta_new = (1.0 + phi + delta) / (draft_cost + float(verify_cost(len(parent) + 1)))
        if theta_new <= theta_prev:
            break
        phi, theta_prev = phi + delta, theta_new
        node = len(parent)
        parent.append(par)
        token.append(int(top_tok[d - 1][r]))
        if r + 1 < k:
            heapq.heappush(heap, (-(par_score + top_lp[d - 1][r + 1]), (*ranks[:-1], r + 1),
                                  par, d, r + 1, par_score))
        if d < L:
            heapq.heappush(heap, (-(s + top_lp[d][0]), (*ranks, 0), node, d + 1, 0, s))
    return parent, token
