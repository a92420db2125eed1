"""The draft tree: a rooted, ordered tree of drafted tokens.

A :class:`DraftTree` is the value every policy returns and every verifier consumes. Node 0 is
the root (the last committed token); nodes ``1..n`` are drafted tokens, each a token path of
length ``depth[v]`` from the root. Parents precede children (``parent[v] < v``), and siblings are
ordered by node index: for trees whose tokens were sampled, that order **is** the draw order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from .jit import njit
from .validation import check_nonnegative_int, check_tree

if TYPE_CHECKING:  # pragma: no cover
    import networkx as nx

__all__ = ["DraftTree", "prefix_tree"]


def _readonly(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


@dataclass(frozen=True, eq=False, repr=False)
class DraftTree:
    """A validated draft tree (immutable).

    Attributes
    ----------
    parent : ndarray of int64, shape (n+1,)
        ``parent[0] == -1`` and ``0 <= parent[v] < v`` for ``v >= 1``.
    token : ndarray of int64, shape (n+1,)
        ``token[0]`` is the root token (the last committed token, ``-1`` if unknown);
        ``token[v] >= 0`` is the token drafted at node ``v``.
    depth : ndarray of int64, shape (n+1,)
        ``depth[0] == 0`` and ``depth[v] == depth[parent[v]] + 1``.

    Notes
    -----
    Build trees with :meth:`from_parents` (validating) or with a policy; the constructor itself
    trusts its arguments. Arrays are read-only. Two trees are equal when their parent and token
    arrays are equal.
    """

    parent: np.ndarray
    token: np.ndarray
    depth: np.ndarray
    has_duplicate_siblings: bool = False

    # ------------------------------------------------------------------ construction
    @classmethod
    def from_parents(cls, parent: Sequence[int] | np.ndarray, token: Sequence[int] | np.ndarray
                     ) -> DraftTree:
        """Validate ``parent``/``token`` arrays and build the tree.

        Parameters
        ----------
        parent : array_like of int, shape (n+1,)
            ``parent[0] == -1``; ``0 <= parent[v] < v`` for every non-root node.
        token : array_like of int, shape (n+1,)
            Root token at index 0 (``>= -1``); non-negative drafted tokens after it.

        Raises
        ------
        ValueError
            Naming the argument and the first offending index. Sibling tokens must also be
            distinct unless the tree is built with :meth:`from_parents_multiset` (sampled
            i.i.d. trees may repeat a sibling token).
        """
        return cls._build(parent, token, allow_duplicate_siblings=False)

    @classmethod
    def from_parents_multiset(cls, parent: Sequence[int] | np.ndarray,
                              token: Sequence[int] | np.ndarray) -> DraftTree:
        """Like :meth:`from_parents`, but siblings may repeat a token.

        Trees whose children were drawn i.i.d. (verified by recursive rejection sampling) can
        contain duplicate siblings; every other tree must not.
        """
        return cls._build(parent, token, allow_duplicate_siblings=True)

    @classmethod
    def _build(cls, parent, token, *, allow_duplicate_siblings: bool) -> DraftTree:
        parent_arr = _as_int_vector(parent, "parent")
        token_arr = _as_int_vector(token, "token")
        if parent_arr.shape != token_arr.shape:
            raise ValueError(
                f"parent and token must have the same length; got {parent_arr.shape[0]} "
                f"and {token_arr.shape[0]}")
        if parent_arr.shape[0] == 0:
            raise ValueError("parent must contain at least the root (parent[0] == -1)")
        if parent_arr[0] != -1:
            raise ValueError(f"parent[0] must be -1 (the root); got {parent_arr[0]}")
        idx = np.arange(parent_arr.shape[0])
        bad = np.flatnonzero((parent_arr[1:] < 0) | (parent_arr[1:] >= idx[1:]))
        if bad.size:
            v = int(bad[0]) + 1
            raise ValueError(
                f"parent[{v}] = {parent_arr[v]} is invalid: every non-root node needs "
                f"0 <= parent[v] < v (parents must precede children)")
        if token_arr[0] < -1:
            raise ValueError(f"token[0] (root token) must be >= -1; got {token_arr[0]}")
        bad = np.flatnonzero(token_arr[1:] < 0)
        if bad.size:
            v = int(bad[0]) + 1
            raise ValueError(
                f"token[{v}] = {token_arr[v]} is negative; drafted tokens must be >= 0")
        if not allow_duplicate_siblings and _has_duplicate_siblings(parent_arr, token_arr):
            pairs = parent_arr[1:] * (int(token_arr.max()) + 1) + token_arr[1:]
            _, first, counts = np.unique(pairs, return_index=True, return_counts=True)
            if np.any(counts > 1):
                dup_pair = pairs[first[np.argmax(counts > 1)]]
                nodes = np.flatnonzero(pairs == dup_pair) + 1
                raise ValueError(
                    f"token: nodes {nodes[0]} and {nodes[1]} are siblings (parent "
                    f"{parent_arr[nodes[0]]}) with the same token {token_arr[nodes[0]]}; use "
                    f"DraftTree.from_parents_multiset for i.i.d.-sampled trees")
        depth = _depths(parent_arr)
        dup = allow_duplicate_siblings and _has_duplicate_siblings(parent_arr, token_arr)
        return cls(_readonly(parent_arr), _readonly(token_arr), _readonly(depth), dup)

    @classmethod
    def root_only(cls, root_token: int = -1) -> DraftTree:
        """The tree with no drafted nodes (budget 0)."""
        return cls.from_parents([-1], [root_token])

    # ------------------------------------------------------------------ basic facts
    @property
    def size(self) -> int:
        """Number of non-root nodes (the budget used)."""
        return int(self.parent.shape[0]) - 1

    @property
    def n_nodes(self) -> int:
        """Number of nodes including the root (``size + 1``)."""
        return int(self.parent.shape[0])

    @property
    def max_depth(self) -> int:
        return int(self.depth.max())

    @property
    def root_token(self) -> int:
        return int(self.token[0])

    def children(self, v: int) -> np.ndarray:
        """Children of node ``v`` in node (draw) order, as an int64 array."""
        return self.child_lists[v]

    @cached_property
    def child_lists(self) -> tuple[np.ndarray, ...]:
        """Children of every node, in node (draw) order (computed once)."""
        order = np.argsort(self.parent[1:], kind="stable") + 1
        counts = np.bincount(self.parent[1:], minlength=self.n_nodes)
        splits = np.cumsum(counts)[:-1]
        return tuple(_readonly(c) for c in np.split(order, splits))

    @cached_property
    def levels(self) -> tuple[np.ndarray, ...]:
        """Node ids grouped by depth: ``levels[d]`` holds the nodes of depth ``d`` in order."""
        order = np.argsort(self.depth, kind="stable")
        bounds = np.searchsorted(self.depth[order], np.arange(self.max_depth + 2))
        return tuple(_readonly(order[bounds[d]:bounds[d + 1]])
                     for d in range(self.max_depth + 1))

    def is_leaf(self) -> np.ndarray:
        """Boolean (n+1,): True where a node has no children."""
        leaf = np.ones(self.n_nodes, dtype=bool)
        leaf[self.parent[1:]] = False
        return leaf

    def paths(self) -> list[tuple[int, ...]]:
        """Token paths of nodes ``1..n`` (root excluded), in node order."""
        out: list[tuple[int, ...]] = [()]
        tok = self.token.tolist()
        for v, p in enumerate(self.parent.tolist()):
            if v == 0:
                continue
            out.append(out[p] + (tok[v],))
        return out[1:]

    def path_nodes(self, v: int) -> tuple[int, ...]:
        """Node ids from the root's child down to ``v`` (root excluded; empty for the root)."""
        nodes = []
        while v > 0:
            nodes.append(int(v))
            v = int(self.parent[v])
        return tuple(reversed(nodes))

    # ------------------------------------------------------------------ verification inputs
    def attention_mask(self) -> np.ndarray:
        """Ancestor-only attention mask, bool (n+1, n+1).

        ``mask[i, j]`` is True iff node ``j`` is an ancestor of ``i`` or ``i`` itself (the root
        is an ancestor of every node). This is the in-tree block of the target's verification
        mask (DDTree ``compile_ddtree_tree``); the cached prefix is visible to every row.
        """
        mask = np.empty((self.n_nodes, self.n_nodes), dtype=bool)
        ancestor_mask(self.parent, mask)
        return mask

    def position_ids(self, start: int) -> np.ndarray:
        """Position ids ``start + depth`` for the verification forward, int64 (n+1,)."""
        return start + self.depth

    def to_networkx(self) -> nx.DiGraph:
        """Export as a ``networkx.DiGraph`` with node attributes ``token`` and ``depth``."""
        import networkx as nx

        g = nx.DiGraph()
        for v in range(self.n_nodes):
            g.add_node(v, token=int(self.token[v]), depth=int(self.depth[v]))
        g.add_edges_from((int(p), v) for v, p in enumerate(self.parent) if v > 0)
        return g

    # ------------------------------------------------------------------ value semantics
    def __eq__(self, other: object) -> bool:
        if not isinstance(other, DraftTree):
            return NotImplemented
        return (np.array_equal(self.parent, other.parent)
                and np.array_equal(self.token, other.token))

    def __hash__(self) -> int:
        return hash((self.parent.tobytes(), self.token.tobytes()))

    def __repr__(self) -> str:
        return (f"DraftTree(size={self.size}, max_depth={self.max_depth}, "
                f"root_token={self.root_token})")


def prefix_tree(tree: DraftTree, budget: int) -> DraftTree:
    """The tree of the first ``budget`` non-root nodes of ``tree``, in node order.

    Parents precede children, so every prefix of the node order is a tree; for a best-first
    builder (DDTree) it is the tree the builder returns at ``budget`` (the trees are nested:
    ``docs/theory/caddtree.md``), which is how the budget rules and :meth:`Round.at_budget
    <treespec_sim.engine.Round.at_budget>` read every smaller budget off one tree.

    Parameters
    ----------
    tree : DraftTree
    budget : int
        Non-root nodes to keep, ``>= 0``; ``tree`` itself is returned when ``budget >=
        tree.size``.

    Returns
    -------
    DraftTree
        Nodes ``0..min(budget, n)`` of ``tree`` (same ids, tokens and root token).

    Raises
    ------
    ValueError
        ``budget`` is not a non-negative integer (``0``: the root alone).
    """
    check_tree(tree)
    budget = check_nonnegative_int(budget, "budget")
    if budget >= tree.size:
        return tree
    if budget == 0:
        return DraftTree.root_only(int(tree.token[0]))
    k = budget + 1
    # a prefix of a valid tree is valid: no need to validate it again
    parent, token = tree.parent[:k].copy(), tree.token[:k].copy()
    dup = tree.has_duplicate_siblings and _has_duplicate_siblings(parent, token)
    return DraftTree(_readonly(parent), _readonly(token), _readonly(tree.depth[:k].copy()), dup)


# ---------------------------------------------------------------------- helpers
def _as_int_vector(x, name: str) -> np.ndarray:
    arr = np.asarray(x)
    if arr.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional; got shape {arr.shape}")
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        if np.issubdtype(arr.dtype, np.floating) and np.all(np.isfinite(arr)) and np.all(
                arr == np.round(arr)):
            arr = arr.astype(np.int64)
        else:
            raise ValueError(f"{name} must contain integers; got dtype {arr.dtype}")
    return np.array(arr, dtype=np.int64, copy=True)


def _depths(parent: np.ndarray) -> np.ndarray:
    """Depths from a parent array with ``parent[v] < v`` (pointer doubling, O(n log n) numpy)."""
    n1 = parent.shape[0]
    depth = np.zeros(n1, dtype=np.int64)
    if n1 == 1:
        return depth
    # depth = number of jumps to reach the root; doubling keeps it vectorised.
    anc = parent.copy()
    anc[0] = 0
    hops = np.ones(n1, dtype=np.int64)
    hops[0] = 0
    while True:
        not_done = anc != 0
        if not not_done.any():
            break
        depth_add = np.where(not_done, hops[anc], 0)
        hops = hops + depth_add
        anc = np.where(not_done, anc[anc], 0)
    return hops


def _has_duplicate_siblings(parent: np.ndarray, token: np.ndarray) -> bool:
    if parent.shape[0] <= 2:
        return False
    pairs = parent[1:] * (int(token.max()) + 1) + token[1:]
    return bool(np.unique(pairs).shape[0] < pairs.shape[0])


@njit(cache=True)
def ancestor_mask(parent: np.ndarray, out: np.ndarray) -> None:
    """Write the ancestor-or-self mask of a tree into ``out``, bool ``(n+1, n+1)`` (its old
    contents do not matter): all False, then each node's path to the root set True
    (``parent[0] = -1``, ``0 <= parent[i] < i``): ``(n+1)^2`` cleared bytes and ``sum of
    depths`` writes."""
    out[:, :] = False
    for i in range(parent.size):
        j = i
        while j >= 0:
            out[i, j] = True
            j = parent[j]
