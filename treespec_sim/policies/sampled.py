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

import math
from collections.abc import Callable

import numpy as np

from ..tree import DraftTree
from ..validation import check_budget, check_root_token
from .draft import MATCHING_RULES, Draft

__all__ = ["MATCHING_RULES", "SAMPLING_SCHEMES", "Draft", "ProposalFn", "SampledDraft",
           "fill_shape", "fill_tree", "k_ary_shape", "marginal_proposal", "sampled_chain",
           "tempered"]

#: ``proposal(depth, parent_token) -> (V,)``: the law the children at ``depth`` (1..L) of a node
#: whose token is ``parent_token`` are drawn from. A DFlash drafter's marginal ignores the
#: parent; a conditional correction (Markov head, pairwise selector) does not.
ProposalFn = Callable[[int, int], np.ndarray]

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


def k_ary_shape(width: int, depth: int, root_token: int = -1) -> DraftTree:
    """Full ``width``-ary tree of the given depth (``width + width^2 + ...`` nodes), tokens 0."""
    width, depth = check_budget(width, "width"), check_budget(depth, "depth")
    parent = [-1]
    frontier = [0]
    for _ in range(depth):
        nxt = []
        for a in frontier:
            for _ in range(width):
                parent.append(a)
                nxt.append(len(parent) - 1)
        frontier = nxt
    return DraftTree.from_parents_multiset(parent, [root_token] + [0] * (len(parent) - 1))


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


#: The draft type of sampled builders (:class:`~treespec_sim.policies.draft.Draft`).
SampledDraft = Draft


def tempered(row, temperature: float) -> np.ndarray:
    r"""The law :math:`q^{1/T} / \sum q^{1/T}` (float64), computed in log space.

    ``temperature`` must be ``> 0``: at ``T = 0`` sampling is the argmax, which is not a law a
    ratio verifier can use (sampled policies switch to deterministic top-k tokens there).
    """
    t = float(temperature)
    if not (t > 0 and math.isfinite(t)):
        raise ValueError(f"temperature must be finite and > 0 to temper a proposal; got "
                         f"{temperature!r}")
    q = np.asarray(row, dtype=np.float64)
    if t == 1.0:
        return q / q.sum()
    with np.errstate(divide="ignore"):
        z = np.log(q) / t
    z -= z.max()
    out = np.exp(z)
    return out / out.sum()


def marginal_proposal(log_q) -> ProposalFn:
    """The DFlash proposal: the depth-``d`` marginal, whatever the parent (``log_q`` (L, V))."""
    q = np.exp(np.asarray(log_q, dtype=np.float64))
    q /= q.sum(axis=1, keepdims=True)

    def proposal(depth: int, parent_token: int) -> np.ndarray:
        return q[depth - 1]

    return proposal


def _top_k(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most likely tokens, best first (ties to the smaller id)."""
    if k < q.size:
        part = np.argpartition(-q, k - 1)[:k]
        cand = np.union1d(part, np.flatnonzero(q >= q[part].min()))
    else:
        cand = np.arange(q.size)
    return cand[np.lexsort((cand, -q[cand]))][:k]


def fill_tree(shape: DraftTree, proposal: ProposalFn, *, scheme: str,
              rng: np.random.Generator, temperature: float = 1.0, cap_to_support: bool = True
              ) -> Draft:
    r"""Pass 2 of Tsubame (and any sampled tree): fill ``shape`` top-down with fresh draws.

    Node ``v``'s children are drawn from ``tempered(proposal(depth(v) + 1, token(v)), T)`` --
    after ``v``'s own token is drawn, so a conditional proposal sees the sampled ancestors
    (condition C2 of ``docs/theory/tsubame.md``), and with fresh randomness (C3).

    Parameters
    ----------
    shape : DraftTree
        Only ``parent`` and the root token are used (a plan from draft-side information only:
        C1).
    proposal : ProposalFn
        ``proposal(depth, parent_token) -> (V,)`` at the drafter's own temperature.
    scheme : {"iid", "without_replacement", "greedy"}
        Must match the verifier (C4): ``"iid"`` with ``"rrs"``; ``"without_replacement"`` with
        ``"rrsw"``, ``"traversal"`` or ``"univer"``; ``"greedy"`` with ``"univer"``.
    rng : numpy.random.Generator
    temperature : float
        Sampling temperature ``T >= 0``. At ``T = 0`` every node gets the top-``k`` tokens of its
        proposal, deterministically (the ``T -> 0`` limit of Gumbel-top-k), and the result must
        be verified with ``"follow"`` or ``"tev"``; ``proposal rows`` is then None.
    cap_to_support : bool
        Without replacement, a node cannot have more children than its proposal has tokens with
        positive mass: with ``True`` the extra children (and their subtrees) are dropped, a
        draft-side decision made before the draws; with ``False`` that case raises.

    Returns
    -------
    SampledDraft
        The tree (children in draw order), the exact proposal rows (None at ``T = 0``), the
        scheme (``"deterministic"`` at ``T = 0``) and the temperature.
    """
    if scheme not in SAMPLING_SCHEMES:
        raise ValueError(f"scheme must be one of {SAMPLING_SCHEMES}; got {scheme!r}")
    t = float(temperature)
    if not (t >= 0 and math.isfinite(t)):
        raise ValueError(f"temperature must be finite and >= 0; got {temperature!r}")
    kids_of = shape.child_lists
    parent = [-1]
    token = [int(shape.token[0])]
    rows: dict[int, np.ndarray] = {}
    # (node in shape, node in output); BFS so a node's token exists before its children draw
    queue = [(0, 0)]
    head = 0
    while head < len(queue):
        src, dst = queue[head]
        head += 1
        kids = kids_of[src]
        if kids.size == 0:
            continue
        depth = int(shape.depth[src]) + 1
        q_raw = np.asarray(proposal(depth, token[dst]), dtype=np.float64)
        if t == 0.0:
            k = min(kids.size, int(np.count_nonzero(q_raw > 0)))
            drawn = _top_k(q_raw, k)
        else:
            q = tempered(q_raw, t)
            support = int(np.count_nonzero(q > 0))
            k = kids.size
            if scheme != "iid" and k > support:
                if not cap_to_support:
                    raise ValueError(f"width {k} at depth {depth} exceeds the proposal's support "
                                     f"({support} tokens) under scheme {scheme!r}")
                k = support
            with np.errstate(divide="ignore"):
                drawn = _draw_children(q, np.log(q), k, scheme, rng)
            rows[dst] = q
        for child_src, x in zip(kids[:k], drawn, strict=True):
            parent.append(dst)
            token.append(int(x))
            queue.append((int(child_src), len(parent) - 1))
    build = DraftTree.from_parents_multiset if (scheme == "iid" and t > 0) else \
        DraftTree.from_parents
    tree = build(parent, token)
    if t == 0.0:
        return Draft(tree, None, "deterministic", None)
    vocab = next(iter(rows.values())).size if rows else 1
    out = np.zeros((tree.n_nodes, vocab))
    for v, q in rows.items():
        out[v] = q
    return Draft(tree, out, scheme, t)


def sampled_chain(proposal: ProposalFn, length: int, *, rng: np.random.Generator,
                  temperature: float = 1.0, root_token: int = -1) -> Draft:
    """A chain of ``length`` tokens drawn one per depth from ``proposal`` (the DFlash marginal,
    or a correction given the sampled parent); verify with ``"rrs"`` (speculative sampling at
    every depth). At ``T = 0`` it is the argmax chain of the proposal (verify with
    ``"follow"``)."""
    n = check_budget(length, "length")
    shape = DraftTree.from_parents(np.arange(-1, n), [check_root_token(root_token)] + [0] * n)
    return fill_tree(shape, proposal, scheme="iid", rng=rng, temperature=temperature)
