r"""Trees from a drafter's *conditional* proposals: an autoregressive drafter's trees.

A block-diffusion drafter (DFlash) gives per-depth marginals in one pass; an autoregressive
drafter (EAGLE, an MTP head, a small draft model) gives, for each drafted token, the law of the
next one given it. With ``proposal(depth, parent_token) -> (V,)`` probabilities (a
:data:`~treespec_sim.policies.sampled.ProposalFn`; the synthetic world's
``draft_conditional`` with ``correction_quality = 1`` is its drafter's true conditional), a
node's path score is :math:`\sum_i \log q(u_i \mid u_{i-1})` and:

``top_k=None``: best first
    DDTree's rule on these scores: the ``budget`` best prefixes, popped from a heap that holds,
    for every emitted node, its next sibling and its first child (scores never rise from a
    parent to a child, nor from a sibling to the next), ties to the smaller rank tuple. With a
    proposal that ignores the parent (a marginal) this is DDTree's tree (as a set).
``top_k=K``: a beam (EAGLE-2, SGLang)
    SGLang's ``--speculative-num-steps S --speculative-eagle-topk K
    --speculative-num-draft-tokens N`` (``python/sglang/srt/speculative/build_eagle_tree.py``;
    EAGLE-2's ``topK_genrate``): the root's top ``K`` children form the first beam; each step,
    every beam node proposes its top ``K`` children and the ``K`` best of those ``K^2`` by path
    score form the next beam, for ``S`` steps; of all ``K + (S - 1) K^2`` generated nodes the
    ``N - 1`` best by path score are kept (ties: shallower first, then generation order), so
    parents precede children. ``K = 1``: the drafter's greedy chain.
"""

from __future__ import annotations

import heapq

import numpy as np

from ..marginals import ranked_candidates
from ..tree import DraftTree
from ..validation import check_budget, check_positive_int
from .sampled import ProposalFn

__all__ = ["conditional_tree"]


def _children(proposal: ProposalFn, depth: int, parent: int, k: int,
              cache: dict) -> tuple[np.ndarray, np.ndarray]:
    """The ``k`` best children (tokens, log-probabilities) of a node holding ``parent`` at
    depth ``depth - 1``; the proposal is asked once per ``(depth, parent)``."""
    key = (depth, parent)
    got = cache.get(key)
    if got is None or got[0].size < min(k, got[2]):
        row = np.asarray(proposal(depth, parent), dtype=np.float64)
        with np.errstate(divide="ignore"):
            lp = np.log(row)
        tok, val = ranked_candidates(lp, -np.inf, k)
        keep = np.isfinite(val)
        got = (tok[keep], val[keep], int(np.count_nonzero(row > 0)))
        cache[key] = got
    return got[0][:k], got[1][:k]


def conditional_tree(proposal: ProposalFn, depth: int, budget: int, *, root_token: int,
                     top_k: int | None = None) -> DraftTree:
    r"""A tree from an autoregressive drafter's conditionals (module docstring).

    Parameters
    ----------
    proposal : callable
        ``proposal(d, parent_token) -> (V,)`` probabilities of the depth-``d`` token given the
        drafted parent (depth 1: the parent is ``root_token``).
    depth : int
        The deepest depth ``L`` (the beam's steps ``S``).
    budget : int
        Non-root nodes (at most).
    root_token : int
        The last committed token (the parent of depth 1).
    top_k : int, optional
        ``None``: best first (DDTree's rule); ``K``: SGLang/EAGLE-2's beam of width ``K``.

    Returns
    -------
    DraftTree
        Parents before children; ``tree.size <= budget`` (fewer where the proposal's support
        runs out).
    """
    depth = check_positive_int(depth, "depth")
    budget = check_budget(budget)
    if top_k is not None:
        top_k = check_positive_int(top_k, "top_k")
    if budget == 0:
        return DraftTree.root_only(root_token)
    cache: dict = {}
    if top_k is None:
        parents, tokens = _best_first(proposal, depth, budget, root_token, cache)
    else:
        parents, tokens = _beam(proposal, depth, budget, root_token, top_k, cache)
    return DraftTree.from_parents(np.array([-1, *parents], dtype=np.int64),
                                  np.array([root_token, *tokens], dtype=np.int64))


def _best_first(proposal: ProposalFn, depth: int, budget: int, root_token: int,
                cache: dict) -> tuple[list[int], list[int]]:
    k = budget  # no node needs a child ranked beyond the budget
    parents: list[int] = []
    tokens: list[int] = []
    node_token = [root_token]
    node_depth = [0]
    node_score = [0.0]
    # heap entries: (-score, rank path, parent node, rank, depth)
    tok, val = _children(proposal, 1, root_token, k, cache)
    heap = [(-float(val[0]), (0,), 0, 0, 1)] if tok.size else []
    while heap and len(tokens) < budget:
        neg, ranks, par, r, d = heapq.heappop(heap)
        ctok, cval = _children(proposal, d, node_token[par], k, cache)
        node = len(node_token)
        parents.append(par)
        tokens.append(int(ctok[r]))
        node_token.append(int(ctok[r]))
        node_depth.append(d)
        node_score.append(-neg)
        if r + 1 < ctok.size:  # the next sibling
            heapq.heappush(heap, (-(node_score[par] + float(cval[r + 1])), (*ranks[:-1], r + 1),
                                  par, r + 1, d))
        if d < depth:  # the first child
            gtok, gval = _children(proposal, d + 1, int(ctok[r]), k, cache)
            if gtok.size:
                heapq.heappush(heap, (-(-neg + float(gval[0])), (*ranks, 0), node, 0, d + 1))
    return parents, tokens


def _beam(proposal: ProposalFn, depth: int, budget: int, root_token: int, top_k: int,
          cache: dict) -> tuple[list[int], list[int]]:
    scores = [0.0]
    parents = [-1]
    tokens = [root_token]
    depths = [0]
    beam = [0]
    for d in range(1, depth + 1):
        cand = []
        for b in beam:
            tok, val = _children(proposal, d, tokens[b], top_k, cache)
            cand.extend((scores[b] + float(v), b, int(t)) for t, v in zip(tok, val, strict=True))
        if not cand:
            break
        start = len(scores)
        for s, b, t in cand:
            scores.append(s)
            parents.append(b)
            tokens.append(t)
            depths.append(d)
        order = sorted(range(len(cand)), key=lambda i: -cand[i][0])[:top_k]  # stable
        beam = [start + i for i in order]
    keep = sorted(range(1, len(scores)), key=lambda i: (-scores[i], depths[i], i))[:budget]
    index = {old: new + 1 for new, old in enumerate(sorted(keep, key=lambda i: (-scores[i],
                                                                               depths[i], i)))}
    order = sorted(keep, key=lambda i: index[i])
    return ([0 if parents[i] == 0 else index[parents[i]] for i in order],
            [tokens[i] for i in order])
