r"""The drafter's own view of a tree: path scores and the surrogate round length.

DDTree (arXiv 2604.12989) Prop. 1: under the factorised surrogate
:math:`Q(y_{1:L}) = \prod_i q_i(y_i)` the expected accepted depth of a tree is
:math:`\sum_{u \in T} q(u)`; in tokens per round (bonus included) :math:`1 + \sum_u q(u)`.
"""

from __future__ import annotations

import numpy as np

from .policies import path_probabilities
from .tree import DraftTree
from .validation import check_log_q

__all__ = ["path_log_scores", "path_probabilities", "surrogate_length"]


def path_log_scores(tree: DraftTree, log_q) -> np.ndarray:
    r"""Log surrogate probability of every node's path, float64 (n+1,); 0 at the root.

    :math:`\log q(u) = \sum_{i \le |u|} \log q_i(u_i)`, accumulated parent-first (the same
    arithmetic as the tree builders, so equal paths give equal scores).
    """
    lp, _ = check_log_q(log_q)
    if tree.max_depth > lp.shape[0]:
        raise ValueError(f"tree depth {tree.max_depth} exceeds log_q's {lp.shape[0]} depths")
    scores = np.zeros(tree.n_nodes, dtype=np.float64)
    for d, nodes in enumerate(tree.levels[1:], start=1):
        scores[nodes] = scores[tree.parent[nodes]] + lp[d - 1, tree.token[nodes]]
    return scores


def surrogate_length(tree: DraftTree, log_q) -> float:
    r"""Surrogate expected tokens per round, :math:`1 + \sum_{u \in T} q(u)`."""
    return float(1.0 + np.exp(path_log_scores(tree, log_q)[1:]).sum())
