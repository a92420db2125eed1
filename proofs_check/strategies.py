"""Hypothesis strategies for the objects the theorems quantify over.

Probability vectors (with a mass floor, or with exact zeros), drafter log-probability arrays,
draft trees with distinct sibling tokens, and target rows for a tree.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from treespec_sim import DraftTree

__all__ = ["convex_costs", "log_q_arrays", "prob_vectors", "target_rows_for", "trees",
           "trees_with_rows"]


@st.composite
def prob_vectors(draw, size: int, *, floor: float = 0.0, zeros: bool = False) -> np.ndarray:
    """A probability vector of length ``size``.

    ``floor``: every entry at least ``floor`` (``floor * size < 1``). ``zeros``: some entries
    may be exactly 0 (at least one stays positive).
    """
    raw = np.array(draw(st.lists(st.floats(0.0, 1.0, allow_nan=False), min_size=size,
                                 max_size=size)), dtype=np.float64)
    if zeros:
        keep = np.array(draw(st.lists(st.booleans(), min_size=size, max_size=size)))
        raw = np.where(keep, raw, 0.0)
    raw = raw + 1e-3  # no all-zero draw
    if zeros:
        raw = np.where(keep, raw, 0.0)
        if raw.sum() == 0:
            raw[draw(st.integers(0, size - 1))] = 1.0
    p = raw / raw.sum()
    if floor > 0:
        p = floor + (1.0 - floor * size) * p
    return p / p.sum()


@st.composite
def log_q_arrays(draw, max_depth: int = 4, max_vocab: int = 5, *, ties: bool = True
                 ) -> np.ndarray:
    """Drafter log-probabilities ``(L, V)``; with ``ties``, some rows have repeated values."""
    L = draw(st.integers(1, max_depth))
    V = draw(st.integers(1, max_vocab))
    rows = []
    for _ in range(L):
        if ties and draw(st.booleans()):
            levels = draw(st.lists(st.sampled_from([1.0, 2.0, 4.0]), min_size=V, max_size=V))
            p = np.array(levels) / np.sum(levels)
        else:
            p = draw(prob_vectors(V, zeros=draw(st.booleans())))
        with np.errstate(divide="ignore"):
            rows.append(np.log(p))
    return np.array(rows)


@st.composite
def trees(draw, max_nodes: int = 8, vocab: int = 3, max_depth: int | None = None
          ) -> DraftTree:
    """A random draft tree with distinct sibling tokens over ``vocab`` tokens."""
    n = draw(st.integers(0, max_nodes))
    parent, token, depth = [-1], [draw(st.integers(-1, vocab - 1))], [0]
    used: dict[int, set[int]] = {0: set()}
    for v in range(1, n + 1):
        options = [u for u in range(v) if len(used[u]) < vocab
                   and (max_depth is None or depth[u] < max_depth)]
        if not options:
            break
        p = draw(st.sampled_from(options))
        free = sorted(set(range(vocab)) - used[p])
        tok = draw(st.sampled_from(free))
        used[p].add(tok)
        used[v] = set()
        parent.append(p)
        token.append(tok)
        depth.append(depth[p] + 1)
    return DraftTree.from_parents(parent, token)


@st.composite
def target_rows_for(draw, tree: DraftTree, vocab: int, *, zeros: bool = True) -> np.ndarray:
    """Target rows ``(n+1, V)`` for ``tree`` (one distribution per node)."""
    return np.stack([draw(prob_vectors(vocab, zeros=zeros and draw(st.booleans())))
                     for _ in range(tree.n_nodes)])


@st.composite
def trees_with_rows(draw, max_nodes: int = 8, vocab: int = 3):
    """``(tree, target_rows)`` pairs."""
    tree = draw(trees(max_nodes=max_nodes, vocab=vocab))
    return tree, draw(target_rows_for(tree, vocab))


@st.composite
def convex_costs(draw, max_tokens: int) -> tuple[float, np.ndarray]:
    """``(draft_cost, verify)`` with ``verify[n - 1]`` the cost of ``n`` tokens, ``n = 1..``
    ``max_tokens``: non-decreasing and convex, with flat regions and repeated slopes (ties)."""
    draft = draw(st.sampled_from([0.0, 0.1, 0.5]))
    base = draw(st.floats(0.05, 2.0))
    slope_values = st.sampled_from([0.0, 0.0, 0.01, 0.05, 0.2, 1.0])
    slopes = sorted(draw(st.lists(slope_values, min_size=max_tokens - 1,
                                  max_size=max_tokens - 1)))
    return float(draft), base + np.concatenate([[0.0], np.cumsum(slopes)])
