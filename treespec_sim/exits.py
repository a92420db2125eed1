r"""Where target mass leaves a draft tree: reach probabilities, the exit law, coverage.

Reproduces the fixed-tree analysis of Hu, Ren, Lu & Zhou, *Where Draft Trees Lose Target Mass:
Exit-Guided Speculative Decoding* (arXiv 2610.11750), Lemma 1 and Theorem 1:

.. math::

    P(v) = \prod_{u \preceq v,\, u \ne \mathrm{root}} p_{\mathrm{parent}(u)}(x_u), \qquad
    \rho(v) = 1 - \sum_{u \in \mathrm{children}(v)} p_v(x_u), \qquad
    w(v) = P(v)\,\rho(v),

with :math:`\sum_v w(v) = 1` (the *exit law*: where a target continuation leaves the tree) and
the coverage :math:`C_p(T) = \sum_{u \ne \mathrm{root}} P(u)`. Every exact path verifier on a
fixed deterministic tree has :math:`E[\tau] \le 1 + C_p(T)` (bonus token included).

Trees with duplicate siblings (i.i.d.-sampled trees) are handled the way a walk that follows
the *first* matching child sees them: later duplicates are never reached (``P = 0``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .rows import as_oracle
from .tree import DraftTree
from .validation import check_positive_int, check_tree

__all__ = [
    "EXIT_CAUSES",
    "ExitDecomposition",
    "coverage",
    "decompose_from_edges",
    "edge_probabilities",
    "exit_decomposition",
    "exit_from_edges",
    "exit_law",
    "reach_from_edges",
    "reach_probabilities",
]

#: Exit-mass causes, in the order of :attr:`ExitDecomposition.by_depth_cause` columns.
EXIT_CAUSES = ("uncovered", "budget", "depth_cap")


def edge_probabilities(tree: DraftTree, target_rows) -> np.ndarray:
    """Target probability of each node's token given its parent's path, float64 (n+1,).

    Entry 0 (the root) is 1. For a repeated sibling token only the first occurrence keeps its
    probability (later copies are unreachable by a walk that follows the first match).
    """
    edges = np.array(as_oracle(target_rows, tree).edge_probs(tree), dtype=np.float64)
    if tree.has_duplicate_siblings:
        pairs = tree.parent[1:] * (int(tree.token.max()) + 1) + tree.token[1:]
        _, first = np.unique(pairs, return_index=True)
        later = np.ones(tree.size, dtype=bool)
        later[first] = False
        edges[1:][later] = 0.0
    return edges


#: Up to this many nodes :func:`reach_from_edges` walks the nodes in a Python loop (7.6 us at
#: B = 64 against 16.5 us by levels, plus the levels themselves, 33 us); above, by levels.
_LOOP_NODES = 160


def reach_from_edges(tree: DraftTree, edges: np.ndarray) -> np.ndarray:
    """Reach probabilities from edge probabilities: a cumulative product down each path.

    ``reach[v] = reach[parent[v]] * edges[v]``, the same products whether the nodes are taken
    in node order (parents precede children) or level by level.
    """
    n = tree.n_nodes
    if n <= _LOOP_NODES:
        parent, edge = tree.parent.tolist(), edges.tolist()
        out = [1.0] * n
        for v in range(1, n):
            out[v] = out[parent[v]] * edge[v]
        return np.array(out, dtype=np.float64)
    reach = np.ones(n, dtype=np.float64)
    for nodes in tree.levels[1:]:
        reach[nodes] = reach[tree.parent[nodes]] * edges[nodes]
    return reach


def reach_probabilities(tree: DraftTree, target_rows) -> np.ndarray:
    r"""Target probability :math:`P(v)` of reaching each node, float64 (n+1,); ``P(root) = 1``.

    Parameters
    ----------
    tree : DraftTree
    target_rows : ndarray (n+1, V) or target oracle
        Row ``v`` is the target's next-token law after the path to node ``v``.
    """
    return reach_from_edges(tree, edge_probabilities(tree, target_rows))


def exit_from_edges(tree: DraftTree, edges: np.ndarray, reach: np.ndarray | None = None
                    ) -> tuple[np.ndarray, np.ndarray]:
    """``(reach, exit law)`` from edge probabilities (:func:`edge_probabilities`); ``reach``,
    if given, is :func:`reach_from_edges` already computed (e.g. a prefix of a larger nested
    tree's, which is the same floats)."""
    if reach is None:
        reach = reach_from_edges(tree, edges)
    child_mass = np.bincount(tree.parent[1:], weights=edges[1:], minlength=tree.n_nodes)
    # Clamp rounding: a fully covered node has residual mass exactly 0, never negative.
    residual = np.clip(1.0 - child_mass, 0.0, None)
    return reach, reach * residual


def exit_law(tree: DraftTree, target_rows) -> np.ndarray:
    r"""The exit law :math:`w(v) = P(v)\rho(v)`, float64 (n+1,), summing to 1.

    :math:`w(v)` is the probability that a target continuation's longest in-tree prefix ends at
    ``v`` (TEV, Lemma 1).
    """
    return exit_from_edges(tree, edge_probabilities(tree, target_rows))[1]


def coverage(tree: DraftTree, target_rows) -> float:
    r"""Target coverage :math:`C_p(T) = \sum_{u \ne root} P(u)` (expected accepted depth of a
    saturated verifier)."""
    return float(reach_probabilities(tree, target_rows)[1:].sum())


@dataclass(frozen=True)
class ExitDecomposition:
    r"""Lost target mass of a tree, by depth and by cause.

    Attributes
    ----------
    by_depth_cause : ndarray float64, shape (D+1, 3)
        Row ``d`` = exit mass at nodes of depth ``d``; columns follow :data:`EXIT_CAUSES`:

        ``uncovered``
            exits at an *inner* node: the target chose a token none of its children carry
            (more siblings would have caught it);
        ``budget``
            exits at a leaf shallower than the depth limit (the budget ran out there);
        ``depth_cap``
            exits at a leaf at the depth limit (the drafter's block ends there).
    coverage : float
        :math:`C_p(T)`; ``1 + coverage`` is the saturated expected round length.
    """

    by_depth_cause: np.ndarray
    coverage: float

    @property
    def by_depth(self) -> np.ndarray:
        """Exit mass per depth, shape (D+1,)."""
        return self.by_depth_cause.sum(axis=1)

    @property
    def by_cause(self) -> dict[str, float]:
        """Total exit mass per cause."""
        totals = self.by_depth_cause.sum(axis=0)
        return {c: float(x) for c, x in zip(EXIT_CAUSES, totals, strict=True)}


def exit_decomposition(tree: DraftTree, target_rows, *, depth_limit: int | None = None
                       ) -> ExitDecomposition:
    """Decompose the exit law by depth and cause (see :class:`ExitDecomposition`).

    Parameters
    ----------
    tree : DraftTree
    target_rows : ndarray (n+1, V) or target oracle
    depth_limit : int, optional
        The drafter's block depth ``L``; leaves at this depth exit by ``depth_cap``. ``None``
        means no cap: every leaf exit counts as ``budget``.
    """
    check_tree(tree)
    if depth_limit is not None:
        depth_limit = check_positive_int(depth_limit, "depth_limit")
    if depth_limit is not None and depth_limit < tree.max_depth:
        raise ValueError(f"depth_limit = {depth_limit} is below the tree's depth "
                         f"{tree.max_depth}")
    return decompose_from_edges(tree, edge_probabilities(tree, target_rows),
                                depth_limit=depth_limit)


def decompose_from_edges(tree: DraftTree, edges: np.ndarray, *, depth_limit: int | None = None,
                         reach: np.ndarray | None = None, law: np.ndarray | None = None
                         ) -> ExitDecomposition:
    """:func:`exit_decomposition` from the tree's edge probabilities (e.g. a prefix of a
    larger nested tree's edges) and, optionally, its reach probabilities (see
    :func:`exit_from_edges`) and exit law ``law`` (with ``reach``: both as
    :func:`exit_from_edges` returns them)."""
    if depth_limit is not None and depth_limit < tree.max_depth:
        raise ValueError(f"depth_limit = {depth_limit} is below the tree's depth "
                         f"{tree.max_depth}")
    if law is not None and reach is None:
        raise ValueError("law needs reach (both from exit_from_edges)")
    reach, w = (reach, law) if law is not None else exit_from_edges(tree, edges, reach)
    leaf = tree.is_leaf()
    cause = np.zeros(tree.n_nodes, dtype=np.int64)  # 0 = uncovered (inner node)
    cause[leaf] = 1
    if depth_limit is not None:
        cause[leaf & (tree.depth == depth_limit)] = 2
    n_depth = (depth_limit if depth_limit is not None else tree.max_depth) + 1
    # bincount adds the weights in node order, as np.add.at does (the same sums, 10x faster).
    n_causes = len(EXIT_CAUSES)
    table = np.bincount(tree.depth * n_causes + cause, weights=w,
                        minlength=n_depth * n_causes).reshape(n_depth, n_causes)
    return ExitDecomposition(table, float(reach[1:].sum()))
