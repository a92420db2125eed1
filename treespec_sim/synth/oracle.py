"""A lazy target oracle for Markov synthetic worlds.

Implements the :class:`treespec_sim.rows.TargetOracle` protocol without materialising the
``(n+1) x V`` row array: because the target is first order, the row after the path to node ``v``
is the kernel row of node ``v``'s token (the root's token is the context's last token). Rows are
computed on demand in ``O(V)`` and cached; single edge probabilities cost ``O(s)``.
"""

from __future__ import annotations

import numpy as np

from ..tree import DraftTree
from .kernel import SparseBoostKernel, as_token_array

__all__ = ["MarkovTargetOracle"]


class MarkovTargetOracle:
    """Lazy target rows for one draft tree.

    Parameters
    ----------
    kernel : SparseBoostKernel
        The target kernel for the context's topic and the sampling temperature.
    node_tokens : ndarray of int64, shape (n+1,)
        The token at each node, with the root replaced by the context's last token.
    tree : DraftTree, optional
        The tree the rows are for; :func:`treespec_sim.rows.as_oracle` refuses them for another.
    checked : bool, default False
        ``node_tokens`` is an int64 array already in ``[0, V)`` (the world's own): not checked
        again.

    Attributes
    ----------
    shape : tuple of int
        ``(n+1, V)``.
    """

    def __init__(self, kernel: SparseBoostKernel, node_tokens: np.ndarray,
                 tree: DraftTree | None = None, *, checked: bool = False) -> None:
        self.kernel = kernel
        #: The tree the rows were built for (checked by :func:`treespec_sim.rows.as_oracle`).
        self.tree = tree
        # range-checked once (here, or by the caller: checked=True): edge_probs then reads
        # the kernel unchecked
        self.node_tokens = (np.asarray(node_tokens, dtype=np.int64) if checked else
                            as_token_array(node_tokens, kernel.vocab_size, "node_tokens"))
        self.node_tokens.flags.writeable = False
        self._rows: dict[int, np.ndarray] = {}
        # the last edge_probs (tree, result): a round reads them twice (E[tau], exits)
        self._edges: tuple[DraftTree, np.ndarray] | None = None

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.node_tokens.shape[0]), self.kernel.vocab_size)

    def row(self, v: int) -> np.ndarray:
        """Target law after the path to node ``v``: float64 (V,), read-only, cached."""
        v = int(v)
        r = self._rows.get(v)
        if r is None:
            if not 0 <= v < self.node_tokens.shape[0]:
                raise ValueError(f"v = {v} is not a node of the tree (n+1 = "
                                 f"{self.node_tokens.shape[0]})")
            r = self.kernel.row(int(self.node_tokens[v]))
            r.flags.writeable = False
            self._rows[v] = r
        return r

    def row_factors(self, v: int):
        """:meth:`~treespec_sim.synth.kernel.SparseBoostKernel.row_factors` of node ``v``'s row
        (None where the row is already built, or at ``T = 0``): for the traversal's first
        residual step, which need not build it."""
        v = int(v)
        if v in self._rows or not 0 <= v < self.node_tokens.shape[0]:
            return None
        return self.kernel.row_factors(int(self.node_tokens[v]))

    def edge_probs(self, tree: DraftTree) -> np.ndarray:
        """``out[v] = row(parent[v])[token[v]]`` for ``v >= 1``, ``out[0] = 1``; ``O(n s)``.

        ``tree`` must have this oracle's node count; its parent/token arrays are read. Read-only;
        the same array again for the same tree (a tree's arrays never change).
        """
        if self._edges is not None and self._edges[0] is tree:
            return self._edges[1]
        if tree.n_nodes != self.node_tokens.shape[0]:
            raise ValueError(f"tree has {tree.n_nodes} nodes but the oracle was built for "
                             f"{self.node_tokens.shape[0]}")
        out = np.ones(tree.n_nodes, dtype=np.float64)
        if tree.size and int(tree.token[1:].max()) >= self.kernel.vocab_size:
            v = int(np.argmax(tree.token[1:] >= self.kernel.vocab_size)) + 1
            raise ValueError(f"tree.token[{v}] = {tree.token[v]} is outside the vocabulary "
                             f"(V = {self.kernel.vocab_size})")
        if tree.size:
            # node tokens were checked when the oracle was built, the tree's just above
            out[1:] = self.kernel.edge_prob_trusted(self.node_tokens[tree.parent[1:]],
                                                    tree.token[1:])
        out.flags.writeable = False
        self._edges = (tree, out)
        return out

    def __repr__(self) -> str:
        return f"MarkovTargetOracle(shape={self.shape}, temperature={self.kernel.temperature:g})"
