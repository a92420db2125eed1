r"""Fill a tree shape with sampled tokens: the drafting schemes the sampled-tree verifiers match.

Node ``v`` at depth ``d`` gets its children drawn from ``proposal_rows[d]`` (for a DFlash drafter:
the depth-``d+1`` marginal at the sampling temperature). Children are stored in draw order, the
order ``"rrs"``, ``"rrsw"``, ``"traversal"`` and ``"univer"`` rely on.

``"iid"``
    i.i.d. draws (verify with ``"rrs"``);
``"without_replacement"``
    a sequential sample without replacement: draw ``i`` from ``q`` renormalised over the tokens
    not drawn before (the law of Gumbel-top-``k`` in its key order,
    ``docs/theory/verification.md``, "rrs and rrsw");
    verify with ``"rrsw"``, ``"traversal"`` or ``"univer"``;
``"greedy"``
    Hu et al. (ICLR 2025): the top ``k - 1`` tokens of ``q`` (descending, ties by id) and one draw
    from ``q`` renormalised off them; verify with ``"univer"`` only.

How a draw is made
------------------
Every draw is an inverse-CDF draw, one uniform per drawn token: ``u`` picks the token whose
interval of the cumulative mass (tokens in index order) holds ``u`` times the total. A law is
prepared once (:class:`PreparedLaw`: block sums over ``sqrt V`` blocks, ``O(V)``), then each
draw costs ``O(sqrt V)``: find the block, then the token inside it. Drawing without replacement
takes the drawn token out of the mass left -- its block re-summed from the tokens that remain,
never by subtraction -- so the next draw is an inverse-CDF draw on the mass left, stepping over
the drawn tokens' intervals: exactly successive sampling without replacement, in draw order.
Each node costs ``O(k sqrt V)``, where the Gumbel-top-``k`` this replaces drew ``V`` Gumbels and
partitioned ``V`` keys per node (~5 ms a node at ``V = 32768``).

One code path serves every ``V`` (the small-world exact-enumeration tests run the sampler the
sweeps run) and everything is float64.

Laws are prepared once per distinct law: a DFlash marginal (:class:`MarginalProposal`) ignores
the parent, so one law per *depth* that has inner nodes; a conditional :data:`ProposalFn` is a
function of ``(depth, parent_token)``, so one law per distinct pair. The draft's proposal is a
:class:`~treespec_sim.proposal.ProposalRows` over those laws (never an ``(n+1, V)`` array).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

import numpy as np

from ..marginals import LazyLogMarginals
from ..paths import LogQ
from ..tree import DraftTree
from ..validation import (
    check_budget,
    check_flag,
    check_rng,
    check_root_token,
    check_temperature,
    check_tree,
)
from ..verify import SCHEMES
from .draft import Draft, ProposalRows

__all__ = ["SAMPLING_SCHEMES", "Draft", "MarginalProposal", "PreparedLaw",
           "ProposalFn", "ProposalRows", "SampledDraft", "draw_children", "fill_shape",
           "fill_tree", "k_ary_shape", "marginal_proposal", "sampled_chain", "tempered"]

#: ``proposal(depth, parent_token) -> (V,)``: the law the children at ``depth`` (1..L) of a node
#: whose token is ``parent_token`` are drawn from. A DFlash drafter's marginal ignores the
#: parent; a conditional correction (Markov head, pairwise selector) does not. It must be a
#: function of its arguments (the fill calls it once per distinct pair). An object may also
#: have ``prefetch(depth, parent_tokens)``: :func:`fill_tree` calls it once per level with every
#: parent of that level before asking for any of their laws (a drafter that computes a level's
#: corrections in one batched pass; ``run_round`` hands a backend's
#: ``draft_conditional_batch`` over this way). One with ``conditions_on_path = True`` is
#: called ``proposal(depth, parent_token, path=...)`` with the node's whole sampled path (the
#: tokens at depths ``1..depth - 1``, the parent last) and ``prefetch(depth, parent_tokens,
#: paths=...)``: its law may depend on every sampled ancestor (a DFlash drafter's second pass
#: with the path written into the block), so the fill asks once per node.
ProposalFn = Callable[[int, int], np.ndarray]

#: The schemes a sampled builder draws with: the verifier rule table's schemes that draw
#: (:data:`treespec_sim.verify.SCHEMES`).
SAMPLING_SCHEMES = tuple(s for s in SCHEMES if s != "deterministic")


# ----------------------------------------------------------------------------- one law
@dataclass(frozen=True, eq=False)
class PreparedLaw:
    """A law over ``0..V-1`` prepared for repeated inverse-CDF draws.

    Tokens are cut into ``ceil(V / B)`` consecutive blocks of ``B = ceil(sqrt(V))``; a draw
    finds its block on the cumulative block masses, then its token on the cumulative sum of
    that one block, so it costs ``O(sqrt V)`` and preparing costs one ``O(V)`` pass with only
    ``O(sqrt V)`` new memory (fresh large arrays, not arithmetic, dominate at ``V = 32768``).

    Attributes
    ----------
    q : ndarray float64 (V,)
        The weights (need not sum to 1: draws are from ``q / q.sum()``).
    block : int
        ``B``.
    block_mass : ndarray float64 (ceil(V / B),)
        ``q`` summed over each block.
    block_cdf : ndarray float64 (ceil(V / B),)
        Cumulative sum of ``block_mass``.
    support : int
        Tokens with positive mass (counted on first use: :meth:`covers` rarely needs it).
    """

    q: np.ndarray
    block: int
    block_mass: np.ndarray
    block_cdf: np.ndarray
    _top: dict = field(default_factory=dict, repr=False)

    @cached_property
    def support(self) -> int:
        """Tokens with positive mass (one ``O(V)`` count, cached)."""
        return int(np.count_nonzero(self.q > 0))

    @cached_property
    def _positive_blocks(self) -> int:
        return int(np.count_nonzero(self.block_mass > 0))

    def covers(self, k: int) -> bool:
        """Whether at least ``k`` tokens have positive mass.

        A block of positive mass holds a positive token, so the ``O(sqrt V)`` count of such
        blocks (cached) settles it whenever ``k`` is at most that; the ``O(V)``
        :attr:`support` only otherwise.
        """
        return k <= self._positive_blocks or k <= self.support

    @classmethod
    def of(cls, q) -> PreparedLaw:
        """Prepare ``q`` (float64 (V,), non-negative, finite positive total): ``O(V)``."""
        q = np.asarray(q, dtype=np.float64)
        if q.ndim != 1 or q.size < 1:
            raise ValueError(f"a law must be a non-empty 1-D array; got shape {q.shape}")
        block = math.isqrt(q.size - 1) + 1  # ceil(sqrt(V))
        mass = np.add.reduceat(q, np.arange(0, q.size, block))
        cdf = np.cumsum(mass)
        if not (cdf[-1] > 0 and math.isfinite(cdf[-1])):
            raise ValueError(f"a law needs a finite positive total mass; got {cdf[-1]!r}")
        return cls(q, block, mass, cdf)

    def top(self, k: int) -> np.ndarray:
        """The ``k`` most likely tokens, best first, ties to the smaller id (cached)."""
        out = self._top.get(k)
        if out is None:
            out = _top_k(self.q, k) if k > 0 else np.empty(0, dtype=np.int64)
            out.flags.writeable = False
            self._top[k] = out
        return out


def _last_positive(w: np.ndarray) -> int:
    return int(np.flatnonzero(w > 0)[-1])


class _Remaining:
    """The mass of one node's law not drawn yet: inverse-CDF draws that skip drawn tokens.

    Drawing token ``x`` zeroes it and re-sums its block from the tokens left (a sum of
    non-negative terms, never ``mass - q[x]``): after drawing a token of mass ``1 - 1e-6``
    (common at shallow depths, more so at ``T < 1``) a subtraction would leave the next draw's
    law with a relative error of ~``1e-10``; the re-sum keeps it at a few ulps.
    """

    def __init__(self, law: PreparedLaw) -> None:
        self.law = law
        self.mass = law.block_mass
        self.cdf = law.block_cdf
        self.drawn: dict[int, list[int]] = {}  # block -> offsets drawn in it

    def _block(self, b: int) -> np.ndarray:
        lo = b * self.law.block
        w = self.law.q[lo: lo + self.law.block]
        gone = self.drawn.get(b)
        if gone:
            w = w.copy()
            w[gone] = 0.0
        return w

    def draw(self, u: float) -> int:
        """The token whose interval of the cumulative mass left (index order) holds
        ``u`` times that mass; never a drawn or zero-mass token."""
        cdf = self.cdf
        t = u * float(cdf[-1])
        b = int(np.searchsorted(cdf, t, side="right"))
        if b >= cdf.size:  # u * total rounded up to total
            b = _last_positive(self.mass)
        if b > 0:
            t -= float(cdf[b - 1])
        w = self._block(b)
        i = int(np.searchsorted(np.cumsum(w), t, side="right"))
        if i >= w.size:  # the block's own sum rounded below t
            i = _last_positive(w)
        return b * self.law.block + i

    def remove(self, x: int) -> None:
        """Take token ``x`` out of the mass left."""
        b, off = divmod(x, self.law.block)
        if self.mass is self.law.block_mass:
            self.mass = self.mass.copy()
        self.drawn.setdefault(b, []).append(off)
        self.mass[b] = self._block(b).sum()
        self.cdf = np.cumsum(self.mass)


def draw_children(law: PreparedLaw, k: int, scheme: str, rng: np.random.Generator
                  ) -> np.ndarray:
    r"""``k`` children drawn from ``law`` under ``scheme``, in draw order: int64 (k,).

    ``"iid"``: ``k`` independent inverse-CDF draws. ``"without_replacement"``: draw ``i`` is
    an inverse-CDF draw on the mass not drawn before (stepping over the drawn tokens'
    intervals), so the ordered tuple has probability
    :math:`\prod_i q(x_i) / (1 - \sum_{j<i} q(x_j))` (successive sampling; the law of
    Gumbel-top-``k`` in key order). ``"greedy"``: :meth:`PreparedLaw.top` ``k - 1`` held, then
    one draw from the rest. One uniform per draw (``rng.random(k)``, or one for greedy);
    ``O(k sqrt V)`` in all.

    Raises
    ------
    ValueError
        ``k`` exceeds the law's support under a scheme without replacement.
    """
    if scheme not in SAMPLING_SCHEMES:
        raise ValueError(f"scheme must be one of {SAMPLING_SCHEMES}; got {scheme!r}")
    if scheme != "iid" and not law.covers(k):
        raise ValueError(f"width {k} exceeds the proposal's support ({law.support} tokens) "
                         f"under scheme {scheme!r}")
    left = _Remaining(law)
    if scheme == "iid":
        return np.array([left.draw(u) for u in rng.random(k).tolist()], dtype=np.int64)
    if scheme == "greedy":
        held = law.top(k - 1)
        for x in held.tolist():
            left.remove(x)
        return np.append(held, left.draw(rng.random())).astype(np.int64)
    out = np.empty(k, dtype=np.int64)
    for n, u in enumerate(rng.random(k).tolist()):
        out[n] = x = left.draw(u)
        if n + 1 < k:
            left.remove(x)
    return out


# ----------------------------------------------------------------------------- shapes
def k_ary_shape(width: int, depth: int, root_token: int = -1) -> DraftTree:
    """Full ``width``-ary tree of the given depth (``width + width^2 + ...`` nodes), tokens 0."""
    width, depth = check_budget(width, "width"), check_budget(depth, "depth")
    root_token = check_root_token(root_token)
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
               ) -> tuple[DraftTree, ProposalRows]:
    """Draw every node's children of ``shape`` under ``scheme``.

    Parameters
    ----------
    shape : DraftTree
        Only ``parent`` (and the root token) are used.
    proposal_rows : ndarray float64 (L, V)
        Row ``d``: the law the children of a depth-``d`` node are drawn from; ``L`` must exceed
        the depth of every inner node. Copied (the result must not change with the input).
    scheme : {"iid", "without_replacement", "greedy"}
    rng : numpy.random.Generator

    Returns
    -------
    tree : DraftTree
    proposal : ProposalRows (n+1, V)
        ``proposal[v] = proposal_rows[depth(v)]`` (clipped to the last row for deepest leaves);
        the ``L`` rows stored once.
    """
    if scheme not in SAMPLING_SCHEMES:
        raise ValueError(f"scheme must be one of {SAMPLING_SCHEMES}; got {scheme!r}")
    rows = np.array(proposal_rows, dtype=np.float64)
    if rows.ndim != 2:
        raise ValueError(f"proposal_rows must be 2-D (L, V); got shape {rows.shape}")
    rows.flags.writeable = False
    inner = np.unique(shape.parent[1:])
    if inner.size and int(shape.depth[inner].max()) >= rows.shape[0]:
        raise ValueError(f"proposal_rows has {rows.shape[0]} rows but the shape has inner nodes "
                         f"at depth {int(shape.depth[inner].max())}")
    laws: dict[int, PreparedLaw] = {}
    token = shape.token.copy()
    kids_of = shape.child_lists
    for v in inner:
        d = int(shape.depth[v])
        if d not in laws:
            laws[d] = PreparedLaw.of(rows[d])
        kids = kids_of[int(v)]
        token[kids] = draw_children(laws[d], kids.size, scheme, rng)
    build = DraftTree.from_parents_multiset if scheme == "iid" else DraftTree.from_parents
    tree = build(shape.parent, token)
    proposal = ProposalRows(tuple(rows), np.minimum(shape.depth, rows.shape[0] - 1),
                            rows.shape[1])
    return tree, proposal


#: The draft type of sampled builders (:class:`~treespec_sim.policies.draft.Draft`).
SampledDraft = Draft


# ----------------------------------------------------------------------------- proposals
def tempered(row, temperature: float) -> np.ndarray:
    r"""The law :math:`q^{1/T} / \sum q^{1/T}` (float64, a new array), computed in log space.

    ``temperature`` must be ``> 0``: at ``T = 0`` sampling is the argmax, which is not a law a
    ratio verifier can use (sampled policies switch to deterministic top-k tokens there).
    """
    t = check_temperature(temperature, positive=True)
    q = np.asarray(row, dtype=np.float64)
    if t == 1.0:
        return q / q.sum()
    with np.errstate(divide="ignore"):
        z = np.log(q)
    return _softmax_inplace(z, t)


def _softmax_inplace(z: np.ndarray, t: float) -> np.ndarray:
    """``softmax(z / t)`` written over ``z`` (a fresh float64 array owned by the caller)."""
    if t != 1.0:
        z /= t
    z -= z.max()
    np.exp(z, out=z)
    z /= z.sum()
    return z


@dataclass(frozen=True, eq=False)
class MarginalProposal:
    """The DFlash proposal: the depth-``d`` marginal, whatever the parent.

    A :data:`ProposalFn` (``proposal(depth, parent_token)`` is the normalised marginal of
    ``depth``) that also says it ignores the parent, so :func:`fill_tree` prepares one law per
    depth instead of one per node. Rows are computed on first use, tempered straight from the
    log-probabilities (one ``exp`` per used depth), and cached read-only.

    Attributes
    ----------
    log_q : array_like (L, V) or LazyLogMarginals
        Drafter log-marginals at depths ``1..L`` (a lazy object is materialised on first use).
    """

    log_q: Any
    _laws: dict = field(default_factory=dict, repr=False)

    @property
    def depth(self) -> int:
        """``L``."""
        return int(np.shape(self.log_q)[0])

    def law(self, depth: int, temperature: float = 1.0) -> np.ndarray:
        """``softmax(log_q[depth - 1] / T)``: float64 (V,), read-only, cached per (depth, T)."""
        t = check_temperature(temperature, positive=True)
        key = (int(depth), t)
        q = self._laws.get(key)
        if q is None:
            if not 1 <= key[0] <= self.depth:
                raise ValueError(f"depth must be in [1, {self.depth}]; got {depth!r}")
            row = self._log_rows[key[0] - 1]
            q = _softmax_inplace(row / t if t != 1.0 else row.copy(), 1.0)  # one new array
            q.flags.writeable = False
            self._laws[key] = q
        return q

    def __call__(self, depth: int, parent_token: int) -> np.ndarray:
        return self.law(depth, 1.0)

    @cached_property
    def _log_rows(self) -> np.ndarray:
        lq = self.log_q
        return np.asarray(lq.dense() if isinstance(lq, LazyLogMarginals) else lq,
                          dtype=np.float64)


def marginal_proposal(log_q: LogQ) -> MarginalProposal:
    """The DFlash proposal: the depth-``d`` marginal, whatever the parent (``log_q`` (L, V) or
    a :class:`~treespec_sim.marginals.LazyLogMarginals`)."""
    return MarginalProposal(log_q)


def _top_k(q: np.ndarray, k: int) -> np.ndarray:
    """The ``k`` most likely tokens, best first (ties to the smaller id)."""
    if k < q.size:
        part = np.argpartition(-q, k - 1)[:k]
        cand = np.union1d(part, np.flatnonzero(q >= q[part].min()))
    else:
        cand = np.arange(q.size)
    return cand[np.lexsort((cand, -q[cand]))][:k]


# ----------------------------------------------------------------------------- the fill
def fill_tree(shape: DraftTree, proposal: ProposalFn, *, scheme: str,
              rng: np.random.Generator, temperature: float = 1.0, cap_to_support: bool = True,
              proposal_temperature: float | None = None) -> Draft:
    r"""Pass 2 of Tsubame (and any sampled tree): fill ``shape`` top-down with fresh draws.

    Node ``v``'s children are drawn from ``tempered(proposal(depth(v) + 1, token(v)), T)`` --
    after ``v``'s own token is drawn, so a conditional proposal sees the sampled ancestors
    (condition C2 of ``docs/theory/tsubame.md``), and with fresh randomness (C3).

    Each distinct law is tempered and prepared once (:class:`PreparedLaw`, ``O(V)``): per depth
    for a :class:`MarginalProposal`, per ``(depth, parent token)`` for any other proposal (a
    :data:`ProposalFn` is a function of those two). Then each node costs ``O(k log V)``
    (:func:`draw_children`).

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
        One uniform per drawn token (none at ``T = 0``).
    temperature : float
        Sampling temperature ``T >= 0``. At ``T = 0`` every node gets the top-``k`` tokens of its
        proposal, deterministically (the ``T -> 0`` limit of Gumbel-top-k), and the result must
        be verified with ``"follow"`` or ``"tev"``; ``proposal rows`` is then None.
    cap_to_support : bool
        Without replacement, a node cannot have more children than its proposal has tokens with
        positive mass: with ``True`` the extra children (and their subtrees) are dropped, a
        draft-side decision made before the draws; with ``False`` that case raises.
    proposal_temperature : float, optional
        Temper the proposal to this temperature (``> 0``) for the draws instead of
        ``temperature``: the drafter's *sampling law* made sharper (``< T``) or flatter
        (``> T``) while its ranking -- the argmax, the plan -- stays the same (the regime map
        of ``docs/theory/tsubame.md``, §5). The proposal rows are the laws actually drawn
        from, so any matching rule stays exact; the draft is still verified at the target's
        ``temperature`` (its ``temperature`` field). Ignored at ``T = 0``; None (default):
        ``temperature``.

    Returns
    -------
    SampledDraft
        The tree (children in draw order, nodes numbered breadth-first), the exact proposal as
        :class:`~treespec_sim.proposal.ProposalRows` (each distinct law once; zero rows
        for leaves; None at ``T = 0``), the scheme (``"deterministic"`` at ``T = 0``) and the
        target temperature it is to be verified at.
    """
    t, t_draw = _check_fill(shape, proposal, scheme, rng, temperature, cap_to_support,
                            proposal_temperature)
    fill = _Fill(shape, proposal, scheme=scheme, rng=rng, t=t, t_draw=t_draw,
                 cap_to_support=cap_to_support)
    kids_of = shape.child_lists
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
        fill.prefetch_level(depth, queue, head - 1)
        drawn = fill.children(depth, dst, kids.size)
        for child_src, x in zip(kids[:drawn.size], drawn, strict=True):
            queue.append((int(child_src), fill.add(dst, int(x))))
    return fill.draft()


def _check_fill(shape: DraftTree, proposal: ProposalFn, scheme: str, rng: np.random.Generator,
                temperature: float, cap_to_support: bool, proposal_temperature: float | None
                ) -> tuple[float, float]:
    """:func:`fill_tree`'s arguments checked: the target temperature ``T`` and the one the
    laws are tempered to for the draws (``proposal_temperature``, else ``T``)."""
    check_tree(shape, "shape")
    if not isinstance(scheme, str) or scheme not in SAMPLING_SCHEMES:
        raise ValueError(f"scheme must be one of {SAMPLING_SCHEMES}; got {scheme!r}")
    check_rng(rng)
    if not callable(proposal):
        raise ValueError(f"proposal must be a callable (depth, parent_token) -> (V,) law, e.g. "
                         f"marginal_proposal(log_q); got {type(proposal).__name__}")
    t = check_temperature(temperature)
    check_flag(cap_to_support, "cap_to_support")
    t_draw = t if proposal_temperature is None or t == 0.0 else \
        check_temperature(proposal_temperature, "proposal_temperature", positive=True)
    return t, t_draw


class _Fill:
    """The tree :func:`fill_tree` builds, node by node in breadth-first order, and the laws
    its nodes' children were drawn from (each distinct law prepared once)."""

    def __init__(self, shape: DraftTree, proposal: ProposalFn, *, scheme: str,
                 rng: np.random.Generator, t: float, t_draw: float,
                 cap_to_support: bool) -> None:
        self.shape, self.proposal, self.scheme, self.rng = shape, proposal, scheme, rng
        self.t, self.t_draw, self.cap_to_support = t, t_draw, cap_to_support
        self.marginal = isinstance(proposal, MarginalProposal)
        self.on_path = not self.marginal and bool(getattr(proposal, "conditions_on_path", False))
        # a conditional proposal may batch a level's laws: prefetch(depth, parent tokens) is
        # told every parent of a level before its first law is asked for (draws unchanged)
        self.prefetch = None if self.marginal else getattr(proposal, "prefetch", None)
        self.prefetched = 0
        self.parent = [-1]
        self.token = [int(shape.token[0])]
        self.path: list[tuple[int, ...]] = [()]  # output node -> its sampled tokens, depths 1..d
        self.law_of = [-1]                       # output node -> index into laws (-1: a leaf)
        self.laws: list[PreparedLaw] = []
        # depth (marginal), (depth, parent token), or the node itself (a path-conditional law)
        self.law_index: dict[Any, int] = {}
        self.raw: dict[Any, np.ndarray] = {}     # the same keys at T = 0: the untempered row
        self.stats: list[tuple[float, float]] = []  # (min, sum) of each law: law_stats

    def prefetch_level(self, depth: int, queue: list[tuple[int, int]], at: int) -> None:
        """On the first node of a level (``queue[at]``), hand the proposal's ``prefetch``
        every parent of that level (in the queue from there on)."""
        if self.prefetch is None or depth <= self.prefetched:
            return
        self.prefetched = depth
        shape, kids_of = self.shape, self.shape.child_lists
        level = [d for s_, d in queue[at:]
                 if int(shape.depth[s_]) == depth - 1 and kids_of[s_].size]
        if self.on_path:
            self.prefetch(depth, [self.token[d] for d in level],
                          paths=[self.path[d] for d in level])
        else:
            self.prefetch(depth, list(dict.fromkeys(self.token[d] for d in level)))

    def children(self, depth: int, dst: int, width: int) -> np.ndarray:
        """The tokens of output node ``dst``'s children at ``depth`` (``width`` planned; fewer
        where the law's support is smaller): its top tokens at ``T = 0``, else drawn."""
        key = depth if self.marginal else ("node", dst) if self.on_path else \
            (depth, self.token[dst])
        if self.t == 0.0:
            q_raw = self.raw.get(key)
            if q_raw is None:
                q_raw = self.raw[key] = np.asarray(self._row(depth, dst), dtype=np.float64)
            return _top_k(q_raw, min(width, int(np.count_nonzero(q_raw > 0))))
        r = self.law_index.get(key)
        if r is None:
            r = self.law_index[key] = self._prepare(depth, dst)
        law = self.laws[r]
        k = width
        if self.scheme != "iid" and not law.covers(k):
            if not self.cap_to_support:
                raise ValueError(f"width {k} at depth {depth} exceeds the proposal's support "
                                 f"({law.support} tokens) under scheme {self.scheme!r}")
            k = law.support
        self.law_of[dst] = r
        return draw_children(law, k, self.scheme, self.rng)

    def _row(self, depth: int, dst: int) -> np.ndarray:
        """The proposal's law of ``dst``'s children (untempered)."""
        return _law(self.proposal, depth, self.token[dst], self.path[dst], self.on_path)

    def _prepare(self, depth: int, dst: int) -> int:
        """Temper and prepare the law of ``dst``'s children; its index in :attr:`laws`."""
        if self.marginal:
            law, st = _prepared(self.proposal.law(depth, self.t_draw), normalise=False)
        elif self.t_draw == 1.0:
            law, st = _prepared(self._row(depth, dst), normalise=True)
        else:
            law, st = _prepared(tempered(self._row(depth, dst), self.t_draw), normalise=False)
        self.laws.append(law)
        self.stats.append(st)  # (min, sum): for the verifier's check
        return len(self.laws) - 1

    def add(self, dst: int, x: int) -> int:
        """Append a child of output node ``dst`` with token ``x``; its output index."""
        self.parent.append(dst)
        self.token.append(x)
        self.path.append((*self.path[dst], x))
        self.law_of.append(-1)
        return len(self.parent) - 1

    def draft(self) -> Draft:
        """The filled tree with its proposal rows (deterministic at ``T = 0``)."""
        build = DraftTree.from_parents_multiset if (self.scheme == "iid" and self.t > 0) else \
            DraftTree.from_parents
        tree = build(self.parent, self.token)
        if self.t == 0.0:
            return Draft(tree, None, "deterministic", None)
        vocab = self.laws[0].q.size if self.laws else 1
        rows = ProposalRows(tuple(law.q for law in self.laws),
                            np.array(self.law_of, dtype=np.intp), vocab,
                            law_stats=tuple(self.stats))
        return Draft(tree, rows, self.scheme, self.t)


def _prepared(row, *, normalise: bool) -> tuple[PreparedLaw, tuple[float, float]]:
    """``PreparedLaw.of(tempered(row, 1.0) if normalise else row)`` (read-only) and its
    ``(min, sum)``."""
    q = tempered(row, 1.0) if normalise else row
    q.flags.writeable = False
    law = PreparedLaw.of(q)
    return law, (law.q.min(), law.q.sum())


def _law(proposal: ProposalFn, depth: int, parent_token: int, path: tuple[int, ...],
         on_path: bool) -> np.ndarray:
    """The law of a node's children: given its whole sampled path where the proposal
    conditions on it, else given its token."""
    if on_path:
        return proposal(depth, parent_token, path=path)
    return proposal(depth, parent_token)


def sampled_chain(proposal: ProposalFn, length: int, *, rng: np.random.Generator,
                  temperature: float = 1.0, root_token: int = -1,
                  proposal_temperature: float | None = None) -> Draft:
    """A chain of ``length`` tokens drawn one per depth from ``proposal`` (the DFlash marginal,
    or a correction given the sampled parent); verify with ``"rrs"`` (speculative sampling at
    every depth). At ``T = 0`` it is the argmax chain of the proposal (verify with
    ``"follow"``). ``proposal_temperature``: draw from the proposal tempered to it instead of
    ``temperature`` (:func:`fill_tree`)."""
    n = check_budget(length, "length")
    shape = DraftTree.from_parents(np.arange(-1, n), [check_root_token(root_token)] + [0] * n)
    return fill_tree(shape, proposal, scheme="iid", rng=rng, temperature=temperature,
                     proposal_temperature=proposal_temperature)
