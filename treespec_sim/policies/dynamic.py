r"""An EAGLE-2-like dynamic tree over per-depth marginals (deterministic tokens).

EAGLE-2 (Li et al., arXiv 2406.16858; ``eagle/model/cnets.py::topK_genrate``) grows a tree depth
by depth: every node of the current *beam* proposes its top-``k`` children, the ``k`` children
with the best path scores form the next beam, and at the end all generated nodes are re-ranked by
path score and the best ``budget`` are kept. Path scores are sums of log-probabilities, so a child
never outranks its parent and the kept set is a tree.

Here the children's scores come from the drafter's per-depth marginals (a DFlash drafter has no
per-parent conditional), :math:`\log q(u) = \sum_i \log q_i(u_i)`. Unlike DDTree, which keeps the
exact ``budget`` best prefixes, the beam can miss prefixes whose parents fell off the beam; with
``top_k >= budget`` the two coincide (as sets).
"""

from __future__ import annotations

import numpy as np

from ..paths import LogQ
from ..tree import DraftTree
from ..validation import check_budget, check_log_q, check_positive_int, check_root_token
from ._ddtree import ranked_candidates

__all__ = ["dynamic_tree"]


def dynamic_tree(log_q: LogQ, budget: int, *, root_token: int = -1, top_k: int = 8) -> DraftTree:
    r"""EAGLE-2-style beam expansion, then a global re-rank to ``budget`` nodes.

    Parameters
    ----------
    log_q : array_like of float, shape (L, V)
        Drafter log-marginals at depths ``1..L``.
    budget : int
        Non-root nodes kept.
    root_token : int
        Token stored at the root.
    top_k : int
        Beam width and children per expanded node (EAGLE-2's default is 10; 8 here).

    Returns
    -------
    DraftTree
        Nodes ordered by decreasing path score (ties: shallower first, then generation order), so
        parents precede children. Tokens are deterministic (the drafter's top-``k`` per node).
    """
    lp, _ = check_log_q(log_q)
    budget = check_budget(budget)
    root_token = check_root_token(root_token, vocab_size=lp.shape[1])
    top_k = check_positive_int(top_k, "top_k")
    if budget == 0:
        return DraftTree.root_only(root_token)
    L, _V = lp.shape
    # Per depth, the top-k tokens (ranked, ties to the smaller id); marginals do not depend on
    # the parent, so every node of a depth proposes the same children.
    cands = [ranked_candidates(lp[d], -np.inf, top_k) for d in range(L)]
    scores = [0.0]
    parents = [-1]
    tokens = [root_token]
    depths = [0]
    beam = np.array([0])
    for d in range(L):
        tok, val = cands[d]
        tok, val = tok[np.isfinite(val)], val[np.isfinite(val)]
        if tok.size == 0 or beam.size == 0:
            break
        base = np.asarray(scores)[beam]
        child_scores = (base[:, None] + val[None, :]).ravel()
        child_parent = np.repeat(beam, tok.size)
        child_token = np.tile(tok, beam.size)
        start = len(scores)
        scores.extend(child_scores.tolist())
        parents.extend(child_parent.tolist())
        tokens.extend(child_token.tolist())
        depths.extend([d + 1] * child_scores.size)
        # next beam: the k best children by path score (stable: generation order on ties)
        order = np.argsort(-child_scores, kind="stable")[:top_k]
        beam = start + order
    s = np.asarray(scores)
    dep = np.asarray(depths)
    gen = np.arange(s.size)
    # parents score >= children and are shallower, so this order puts every parent first
    keep = np.lexsort((gen[1:], dep[1:], -s[1:]))[:budget] + 1
    new_index = {0: 0}
    for i, v in enumerate(keep.tolist(), start=1):
        new_index[v] = i
    parent = [-1] + [new_index[parents[v]] for v in keep.tolist()]
    token = [root_token] + [tokens[v] for v in keep.tolist()]
    return DraftTree.from_parents(parent, token)
