"""The deterministic superset tree a trace records: DDTree, then the argmax chain's and the
dynamic tree's nodes DDTree left out (``docs/traces.md``, "Superset")."""

from __future__ import annotations

import numpy as np

from ..paths import LogQ
from ..tree import DraftTree
from ._chain import chain
from ._ddtree import ddtree
from .dynamic import dynamic_tree

__all__ = ["superset"]


def superset(log_q: LogQ, b_max: int, *, root_token: int = -1) -> DraftTree:
    """The recorded deterministic superset tree of a round (``docs/traces.md``, "Superset").

    DDTree at ``b_max`` first (its nodes in pop order, so every smaller DDTree is a prefix),
    then the nodes of the argmax chain that DDTree left out (a flat drafter can rank more than
    ``b_max`` shallow prefixes above a deep chain node), then those of the EAGLE-2-like dynamic
    tree at ``b_max`` (:func:`treespec_sim.policies.dynamic_tree`, default width;
    nested, so it holds the dynamic tree of every smaller budget), each in its own order.

    Parameters
    ----------
    log_q : ndarray (L, V) or LazyLogMarginals
    b_max : int
    root_token : int

    Returns
    -------
    DraftTree
        At least ``min(b_max, ...)`` nodes; the first ``b_max`` are ``ddtree(log_q, b_max)``.
    """
    tree = ddtree(log_q, b_max, root_token=root_token)
    parent, token = tree.parent.tolist(), tree.token.tolist()
    kids = {(p, t): v for v, (p, t) in enumerate(zip(parent, token, strict=True)) if v}
    for extra in (chain(log_q, root_token=root_token),
                  dynamic_tree(log_q, b_max, root_token=root_token)):
        mapped = [0]
        for v in range(1, extra.n_nodes):
            key = (mapped[int(extra.parent[v])], int(extra.token[v]))
            u = kids.get(key)
            if u is None:
                u = len(parent)
                parent.append(key[0])
                token.append(key[1])
                kids[key] = u
            mapped.append(u)
    if len(parent) == tree.n_nodes:
        return tree
    return DraftTree.from_parents(np.asarray(parent, dtype=np.int64),
                                  np.asarray(token, dtype=np.int64))
