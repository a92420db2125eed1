r"""Exact laws of one round on a *sampled* tree, by enumerating every drafted tree.

A *shape* (a :class:`~treespec_sim.DraftTree` whose tokens are ignored) fixes how many children
each node gets. A *drafting scheme* fills it: node ``v``'s children are drawn from
``proposal_fn(path to v)``. Every possible filled tree is enumerated with its probability, the
verifier's exact round law is computed on it (``VerifierRule.round_law``: analytic coin
branching, no sampling), and the mixture is the law of the emitted tokens. Extending every
emitted string with target draws to ``depth + 1`` tokens and comparing with the target's own law
is the losslessness check (``docs/theory/verification.md`` "The exactness test").

Drafting schemes:

``"iid"``
    children i.i.d. from ``q`` (node order = draw order);
``"without_replacement"``
    sequential draws, each from ``q`` renormalised over the tokens not yet drawn;
``"greedy"``
    Hu et al.'s Greedy drafts: the top ``k - 1`` tokens of ``q`` (descending, ties by id), then
    one draw from ``q`` renormalised off them. A special case of sequential drafting with the
    first ``k - 1`` "draws" fixed, so the conditional rules (``univer``) verify it losslessly;

and the known-buggy ones (the verifier is told ``q`` but the tokens come from elsewhere):

``"top_k"``
    deterministic top-``k`` children (pitfall: verified with the soft ``q``);
``"tempered"``
    sequential draws without replacement from :math:`q^2/\sum q^2` (temperature 0.5);
``"post_hoc"``
    draw ``k + 1`` without replacement, keep the ``k`` with the highest ``q`` in draw order.
"""

from __future__ import annotations

import itertools
from collections import defaultdict
from collections.abc import Callable, Iterator

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.rows import ArrayOracle
from treespec_sim.verify import RULES

from .enumerate import draw_tuples

__all__ = ["SCHEMES", "enumerate_trees", "mean_length", "round_law", "target_law_from",
           "two_level_shape"]

#: Drafting schemes :func:`enumerate_trees` knows (the last three are known-buggy).
SCHEMES = ("iid", "without_replacement", "greedy", "top_k", "tempered", "post_hoc")

RowFn = Callable[[tuple[int, ...]], np.ndarray]


def _top(q: np.ndarray, k: int) -> list[int]:
    order = sorted(range(q.size), key=lambda x: (-q[x], x))
    return order[:k]


def _children_draws(q: np.ndarray, k: int, scheme: str
                    ) -> Iterator[tuple[tuple[int, ...], float]]:
    """Every ordered child-token tuple of one node under ``scheme``, with its probability."""
    if scheme == "iid":
        yield from draw_tuples(q, k, replacement=True)
    elif scheme == "without_replacement":
        yield from draw_tuples(q, k, replacement=False)
    elif scheme == "greedy":
        held = _top(q, k - 1)
        rest = q.copy()
        rest[held] = 0.0
        for j in np.flatnonzero(rest > 0):
            yield (*held, int(j)), float(rest[j] / rest.sum())
    elif scheme == "top_k":
        yield tuple(_top(q, k)), 1.0
    elif scheme == "tempered":
        sharp = q**2 / np.sum(q**2)
        yield from draw_tuples(sharp, k, replacement=False)
    elif scheme == "post_hoc":
        kept: dict[tuple[int, ...], float] = defaultdict(float)
        for tup, prob in draw_tuples(q, k + 1, replacement=False):
            drop = min(tup, key=lambda x: (q[x], -x))
            kept[tuple(x for x in tup if x != drop)] += prob
        yield from kept.items()
    else:
        raise ValueError(f"scheme must be one of {SCHEMES}; got {scheme!r}")


def enumerate_trees(shape: DraftTree, proposal_fn: RowFn, scheme: str
                    ) -> Iterator[tuple[DraftTree, np.ndarray, float]]:
    """Every filled tree of ``shape`` under ``scheme``: ``(tree, proposal rows, probability)``.

    ``proposal rows`` (n+1, V) hold ``proposal_fn(path)`` for every node with children (what
    the verifier is told the children were drawn from) and NaN rows for leaves: a rule that
    read a leaf's row would propagate NaN, never a silent placeholder.
    """
    inner = [v for v in range(shape.n_nodes) if shape.children(v).size]
    n1 = shape.n_nodes

    def fill(i: int, tokens: list[int], rows: list[np.ndarray | None], prob: float):
        if i == len(inner):
            tree = DraftTree.from_parents_multiset(shape.parent, tokens)
            vocab = next(r.size for r in rows if r is not None)
            prop = np.array([r if r is not None else np.full(vocab, np.nan) for r in rows])
            yield tree, prop, prob
            return
        v = inner[i]
        path = tuple(tokens[u] for u in _path_nodes(shape, v))
        q = np.asarray(proposal_fn(path), dtype=np.float64)
        kids = shape.children(v)
        for tup, p_tup in _children_draws(q, kids.size, scheme):
            new_tokens = list(tokens)
            for c, x in zip(kids, tup, strict=True):
                new_tokens[c] = x
            new_rows = list(rows)
            new_rows[v] = q
            yield from fill(i + 1, new_tokens, new_rows, prob * p_tup)

    start = [int(shape.token[0])] + [0] * (n1 - 1)
    yield from fill(0, start, [None] * n1, 1.0)


def _path_nodes(shape: DraftTree, v: int) -> list[int]:
    out = []
    while v > 0:
        out.append(v)
        v = int(shape.parent[v])
    return out[::-1]


LawFn = Callable[[DraftTree, np.ndarray, np.ndarray], dict[tuple[int, ...], float]]


def round_law(shape: DraftTree, row_fn: RowFn, proposal_fn: RowFn, *, scheme: str,
              law_fn: LawFn) -> dict[tuple[int, ...], float]:
    """Law of one round's emitted tokens: mixture over filled trees of ``law_fn``'s law.

    ``law_fn(tree, target_rows, proposal)`` is a verifier's exact law for fixed tokens, e.g.
    ``lambda t, rows, prop: RULES["univer"].round_law(t, ArrayOracle(rows, t), prop)``.
    """
    law: dict[tuple[int, ...], float] = defaultdict(float)
    for tree, prop, prob in enumerate_trees(shape, proposal_fn, scheme):
        rows = np.array([row_fn(path) for path in [(), *tree.paths()]])
        for s, ps in law_fn(tree, rows, prop).items():
            law[s] += prob * ps
    return dict(law)


def target_law_from(row_fn: RowFn, n_tokens: int, vocab: int) -> dict[tuple[int, ...], float]:
    """The target's law of the next ``n_tokens`` tokens under ``row_fn`` (all ``V^n`` strings)."""
    law = {}
    for seq in itertools.product(range(vocab), repeat=n_tokens):
        prob = 1.0
        for i in range(n_tokens):
            prob *= float(row_fn(seq[:i])[seq[i]])
            if prob == 0.0:
                break
        if prob > 0.0:
            law[seq] = prob
    return law


def mean_length(shape: DraftTree, row_fn: RowFn, proposal_fn: RowFn, *, scheme: str,
                rule: str) -> float:
    r"""Exact :math:`E[\tau]` of ``rule`` over the draws of ``scheme`` and the verifier's coins."""

    spec = RULES[rule]
    total = 0.0
    for tree, prop, prob in enumerate_trees(shape, proposal_fn, scheme):
        rows = np.array([row_fn(path) for path in [(), *tree.paths()]])
        total += prob * spec.expected_length(tree, ArrayOracle(rows, tree), prop)
    return total


def two_level_shape(k1: int, k2: int) -> DraftTree:
    """The shape with ``k1`` root children, each with ``k2`` children (tokens placeholders)."""
    parent = [-1] + [0] * k1 + [1 + i for i in range(k1) for _ in range(k2)]
    return DraftTree.from_parents_multiset(parent, [-1] + [0] * (len(parent) - 1))
