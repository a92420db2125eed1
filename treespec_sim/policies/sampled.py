r"""Fill a tree shape with sampled tokens: the drafting schemes the sampled-tree verifiers match.

Node ``v`` at depth ``d`` gets its children drawn from ``proposal_rows[d]`` (for a DFlash drafter:
the depth-``d+1`` marginal at the sampling temperature). Children are stored in draw order, the
order ``"rrs"``, ``"rrsw"``, ``"traversal"`` and ``"univer"`` rely on.

``"iid"``
    i.i.d. draws (verify with ``"rrs"``);
``"without_replacement"``
    a sequential sample without replacement, by Gumbel-top-k: the top ``k`` of
    :math:`\log q + G` sorted by the perturbed key is exactly that sample in its draw order
    (research note ``verification_theory.md`` §3); verify with ``"rrsw"``, ``"traversal"`` or
    ``"univer"``;
``"greedy"``
    Hu et al. (ICLR 2025): the top ``k - 1`` tokens of ``q`` (descending, ties by id) and one draw
    from ``q`` renormalised off them; verify with ``"univer"`` only.
"""

from __future__ import annotations

import numpy as np

from ..tree import DraftTree

__all__ = ["SAMPLING_SCHEMES", "fill_shape"]

SAMPLING_SCHEMES = ("iid", "without_replacement", "greedy")


def _draw_children(q: np.ndarray, log_q: np.ndarray, k: int, scheme: str,
                   rng: np.random.Generator) -> np.ndarray:
    support = int(np.count_nonzero(q > 0))
    if scheme != "iid" and k > support:
        raise ValueError(f"width {k} exceeds the proposal's support ({support} tokens) under "
                         f"scheme {scheme!r}")
    if scheme == "iid":
        return rng.choice(q.size, size=k, p=q)
    if scheme == "without_replacement":
        keys = log_q + rng.gumbel(size=q.size)
        top = np.argpartition(-keys, k - 1)[:k]
        return top[np.argsort(-keys[top], kind="stable")]
    held = np.lexsort((np.arange(q.size), -q))[: k - 1]
    rest = q.copy()
    rest[held] = 0.0
    last = rng.choice(q.size, p=rest / rest.sum())
    return np.append(held, last)


def fill_shape(shape: DraftTree, proposal_rows, *, scheme: str, rng: np.random.Generator
               ) -> tuple[DraftTree, np.ndarray]:
    """Draw every node's children of ``shape`` under ``scheme``.

    Parameters
    ----------
    shape : DraftTree
        Only ``parent`` (and the root token) are used.
    proposal_rows : ndarray float64 (L, V)
        Row ``d``: the law the children of a depth-``d`` node are drawn from; ``L`` must exceed
        the depth of every inner node.
    scheme : {"iid", "without_replacement", "greedy"}
    rng : numpy.random.Generator

    Returns
    -------
    tree : DraftTree
    proposal : ndarray float64 (n+1, V)
        ``proposal[v] = proposal_rows[depth(v)]`` (clipped to the last row for deepest leaves).
    """
    if scheme not in SAMPLING_SCHEMES:
        raise ValueError(f"scheme must be one of {SAMPLING_SCHEMES}; got {scheme!r}")
    rows = np.asarray(proposal_rows, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"proposal_rows must be 2-D (L, V); got shape {rows.shape}")
    inner = np.unique(shape.parent[1:])
    if inner.size and int(shape.depth[inner].max()) >= rows.shape[0]:
        raise ValueError(f"proposal_rows has {rows.shape[0]} rows but the shape has inner nodes "
                         f"at depth {int(shape.depth[inner].max())}")
    with np.errstate(divide="ignore"):
        log_rows = np.log(rows)
    token = shape.token.copy()
    for v in inner:
        kids = shape.children(int(v))
        d = int(shape.depth[v])
        token[kids] = _draw_children(rows[d], log_rows[d], kids.size, scheme, rng)
    build = DraftTree.from_parents_multiset if scheme == "iid" else DraftTree.from_parents
    tree = build(shape.parent, token)
    proposal = rows[np.minimum(shape.depth, rows.shape[0] - 1)]
    return tree, proposal
