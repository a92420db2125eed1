r"""The drafter's score of every path of a draft tree.

Under the factorised surrogate :math:`Q(y_{1:L}) = \prod_i q_i(y_i)` a node ``u`` of depth
``d`` scores :math:`\log q(u) = \sum_{i \le d} \log q_i(u_i)` (DDTree, arXiv 2604.12989,
Prop. 1; ``docs/theory/ddtree_surrogate.md``). The tree builders rank prefixes by it, the round
loop reports the surrogate from it, and the budget rules (CaDDTree, long-run) read the pop
probabilities off it, so it is written here, below all of them: one accumulation, parent
first, the same arithmetic as the builders (equal paths give equal scores).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

from .marginals import LazyLogMarginals
from .tree import DraftTree
from .validation import check_log_q, check_tree

__all__ = ["LogQ", "path_log_scores", "path_probabilities"]

#: What a builder, the round loop and :func:`path_log_scores` take as ``log_q``: the drafter's
#: log-probabilities at depths ``1..L``, shape (L, V) (numpy, a list or torch, any float dtype;
#: checked by :func:`treespec_sim.validation.check_log_q`), or lazy ones.
LogQ = ArrayLike | LazyLogMarginals


def _accumulate(tree: DraftTree, lp: np.ndarray | LazyLogMarginals) -> np.ndarray:
    """:math:`\\log q(u)` for every node, float64 (n+1,), 0 at the root; ``lp`` is read as
    given (no checks), lazily where it is :class:`~treespec_sim.marginals.LazyLogMarginals`."""
    scores = np.zeros(tree.n_nodes, dtype=np.float64)
    lazy = isinstance(lp, LazyLogMarginals)
    for d, nodes in enumerate(tree.levels[1:], start=1):
        toks = tree.token[nodes]
        scores[nodes] = scores[tree.parent[nodes]] + (
            lp.values(d - 1, toks) if lazy else lp[d - 1, toks])
    return scores


def path_log_scores(tree: DraftTree, log_q: LogQ) -> np.ndarray:
    r"""Log surrogate probability of every node's path, validated.

    Parameters
    ----------
    tree : DraftTree
    log_q : array_like of float, shape (L, V), or LazyLogMarginals
        Drafter log-probabilities at depths ``1..L`` (checked by
        :func:`treespec_sim.validation.check_log_q`).

    Returns
    -------
    ndarray of float64, shape (n+1,)
        :math:`\log q(u) = \sum_{i \le |u|} \log q_i(u_i)`; 0 at the root.

    Raises
    ------
    ValueError
        Bad ``log_q``, or a tree deeper than ``log_q``'s ``L`` depths.
    """
    check_tree(tree)
    lp, _ = check_log_q(log_q)
    if tree.max_depth > lp.shape[0]:
        raise ValueError(f"tree depth {tree.max_depth} exceeds log_q's {lp.shape[0]} depths")
    return _accumulate(tree, lp)


def path_probabilities(tree: DraftTree, lp: np.ndarray | LazyLogMarginals) -> np.ndarray:
    """Surrogate probability :math:`q(u)` of every non-root node's path, in node order (for
    DDTree: pop order).

    The builders' hot path: ``lp`` is trusted (already checked by the builder or the round
    loop) and read lazily where it is :class:`~treespec_sim.marginals.LazyLogMarginals`, so
    only the tree's tokens are looked up.

    Parameters
    ----------
    tree : DraftTree
    lp : ndarray, shape (L, V), or LazyLogMarginals
        Drafter log-probabilities at depths ``1..L``, at least ``tree.max_depth`` of them.

    Returns
    -------
    ndarray of float64, shape (n,)
        :math:`q(u)` of nodes ``1..n``.
    """
    return np.exp(_accumulate(check_tree(tree), lp)[1:])
