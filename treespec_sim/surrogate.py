r"""The drafter's own view of a tree: path scores and the surrogate round length.

DDTree (arXiv 2604.12989) Prop. 1: under the factorised surrogate
:math:`Q(y_{1:L}) = \prod_i q_i(y_i)` the expected accepted depth of a tree is
:math:`\sum_{u \in T} q(u)`; in tokens per round (bonus included) :math:`1 + \sum_u q(u)`.
The path scores are :mod:`treespec_sim.paths`' (re-exported here).
"""

from __future__ import annotations

import numpy as np

from .paths import LogQ, path_log_scores, path_probabilities
from .tree import DraftTree

__all__ = ["path_log_scores", "path_probabilities", "surrogate_length"]


def surrogate_length(tree: DraftTree, log_q: LogQ) -> float:
    r"""Surrogate expected tokens per round, :math:`1 + \sum_{u \in T} q(u)`.

    Parameters
    ----------
    tree : DraftTree
    log_q : array_like of float, shape (L, V), or LazyLogMarginals
        Checked (:func:`~treespec_sim.paths.path_log_scores`).
    """
    return float(1.0 + np.exp(path_log_scores(tree, log_q)[1:]).sum())
