r"""Prefix-scaled, post-order tree verification: Traversal and UniVer (reconstruction).

Both rules run the same recursion and differ only in the *horizontal* step: in which order a
node's children are tried and which proposal law each trial is judged against.

The recursion (``docs/theory/verification.md``, ``docs/theory/univer.md``). Node ``a`` is
visited with a *prefix acceptance probability* :math:`s_a \in [0, 1]` and a target
distribution :math:`r_a` over its next token (initially the target row :math:`p_a`). Its
children are tried one at a time; trying child ``c`` (token ``x``, trial proposal
:math:`\rho`) visits ``c`` with

.. math:: s_c = \min\bigl(1,\; s_a r_a(x) / \rho(x)\bigr),

recursively, *before* any later sibling (post-order). If nothing in ``c``'s subtree is emitted,
``c`` is deleted and ``a`` is updated with :math:`\mu = s_a r_a`:

.. math::
    Z = \textstyle\sum_y (\mu - \rho)_+(y),\quad R = \sum_y (\rho - \mu)_+(y) = Z + 1 - s_a,
    \quad r_a \leftarrow \mathrm{norm}\bigl((\mu - \rho)_+\bigr),\quad s_a \leftarrow Z/R.

When every child of ``a`` has been deleted, ``a`` emits its path and a bonus
:math:`y \sim r_a` with probability :math:`s_a`; otherwise ``a`` is deleted in turn. The root has
:math:`s = 1` throughout, so a round always emits.

Invariant (the proof of losslessness): averaged over ``a``'s subtree and the coins, the
visit of ``a`` emits the continuation ``c`` with probability :math:`s_a\,P(c \mid a)` and deletes
``a`` with probability :math:`1 - s_a`. Each trial is then ordinary speculative sampling of
:math:`\rho` against the sub-probability target :math:`\mu`, and the remainder is a fresh instance
of the same problem with target mass ``Z`` over a rejection event of probability ``R``.

Horizontal steps:

``"traversal"`` (Weng et al., arXiv 2505.12398, as reconstructed in ``docs/theory/verification.md``)
    children in draw order, each judged against :math:`q_a` renormalised over the tokens not
    drawn before it (RRSw's proposal). On a chain this is block verification (Sun et al.,
    arXiv 2403.10444); on one level it is RRSw.
``"univer"`` (UniVer, Weng, Hu & Yairi, arXiv 2605.04543; a reconstruction)
    *conditional* OT: condition on the first :math:`k-1` drawn children :math:`T` (held fixed),
    under which the last draw is :math:`J \sim q_a(\cdot \mid \notin T)`. Try ``J`` first against
    that law, then each ``t`` in ``T`` against the point mass :math:`\delta_t`. This is Hu et al.'s
    Greedy verifier (arXiv 2502.18779) applied to the scaled target; it reaches every token's
    bound :math:`\min(\mu(y), P(y \in C \mid T))` at once, so it solves the node's conditional
    OT for every value vector. With :math:`T` = the top :math:`k-1` of ``q`` it is exactly the
    Greedy-draft verifier; on a chain it is block verification.

Expected length is exact and cheap: the run is a fixed sequence of emission *opportunities*
(which node, with what conditional chance, from which bonus law) that does not depend on how an
earlier opportunity failed, so :math:`E[\tau] = \sum_j \prod_{i<j}(1 - c_i)\,c_j\,(1 + d_j)`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator

import numpy as np

from .._sampling import sample_categorical
from ..jit import njit
from ..proposal import ProposalRows
from ..rows import TargetOracle
from ..tree import DraftTree
from .outcome import Outcome
from .univer import CHOOSERS, COIN, NodeView, trials

__all__ = ["HORIZONTAL_STEPS", "emission_weights", "opportunities", "opportunities_with",
           "round_law_from", "traversal_expected_length", "traversal_round_law",
           "traversal_sample"]

#: Rejection or residual mass below this is treated as exactly zero (rounding of ``r == rho``).
_ZERO_MASS = 1e-15


@njit(cache=True)
def _residual(r, s, rho, out):
    """``out = max(s r - rho, 0)`` (float64 ``(V,)``; ``out`` may be ``r``) and its two masses
    ``(Z, R) = (sum out, sum max(rho - s r, 0))``, in one pass: each sum adds entry ``i`` to
    lane ``i % 8`` in index order and combines the lanes ``((l0 + l1) + (l2 + l3)) + ((l4 +
    l5) + (l6 + l7))`` -- one order, the same floats on every CPU."""
    z = np.zeros(8)
    g = np.zeros(8)
    for i in range(out.size):
        d = s * r[i] - rho[i]
        if d > 0.0:
            out[i] = d
            z[i % 8] += d
        else:
            out[i] = 0.0
            g[i % 8] -= d
    return (((z[0] + z[1]) + (z[2] + z[3])) + ((z[4] + z[5]) + (z[6] + z[7])),
            ((g[0] + g[1]) + (g[2] + g[3])) + ((g[4] + g[5]) + (g[6] + g[7])))

#: Rules (step choosers) known to :func:`opportunities`.
HORIZONTAL_STEPS = tuple(CHOOSERS)

Opportunity = tuple[int, float, np.ndarray]


def _exact_scale(z_mass: float, r_mass: float, rho_x: float) -> float:
    """The prefix acceptance probability left at a node after deleting a child: ``Z / R``."""
    return min(1.0, z_mass / r_mass)


def opportunities(tree: DraftTree, oracle: TargetOracle, proposal: np.ndarray, *,
                  step: str | Callable[[NodeView], str]) -> Iterator[Opportunity]:
    """The run's emission opportunities in order: ``(node, chance, bonus law)``.

    Opportunity ``j`` emits ``node``'s path and a bonus drawn from ``bonus law`` with probability
    ``chance`` given that every earlier opportunity failed. The last opportunity is the root's,
    with chance 1. Opportunities that cannot occur (a visit with :math:`s = 0`) are skipped.
    ``step`` is a rule name of :data:`HORIZONTAL_STEPS` or a chooser ``NodeView -> step``.
    """
    return opportunities_with(tree, oracle, proposal, step=step, scale_update=_exact_scale)


def _chances(tree: DraftTree, oracle: TargetOracle, proposal: np.ndarray, *,
             step: str | Callable[[NodeView], str]) -> Iterator[Opportunity]:
    """:func:`opportunities` without the leaves' bonus laws (``None`` in their place): the
    same nodes and chances, and no target row of a leaf is read (for exact E[tau])."""
    return opportunities_with(tree, oracle, proposal, step=step, scale_update=_exact_scale,
                              laws=False)


def _emission_chances(tree: DraftTree, oracle: TargetOracle, proposal: np.ndarray, *,
                      step: str | Callable[[NodeView], str]) -> Iterator[Opportunity]:
    """:func:`_chances` without any bonus law (``None`` throughout): exact E[tau] only."""
    return opportunities_with(tree, oracle, proposal, step=step, scale_update=_exact_scale,
                              laws=False, _bonus=False)


def _subtree_sizes(tree: DraftTree) -> np.ndarray:
    size = np.ones(tree.n_nodes, dtype=np.int64)
    for v in range(tree.n_nodes - 1, 0, -1):
        size[tree.parent[v]] += size[v]
    return size


def _coin(scale: float, inner: Iterator[Opportunity]) -> Iterator[Opportunity]:
    r"""Opportunities of "with probability ``scale`` run ``inner`` (a scale-1 run), else
    nothing": emission ``j`` has absolute probability :math:`s\prod_{i<j}(1-c_i)c_j`, so its
    chance given the earlier failures is that over :math:`1 - s + s\prod_{i<j}(1-c_i)`."""
    survive = 1.0  # prod of (1 - c_i) of the inner run so far
    for v, chance, law in inner:
        left = 1.0 - scale + scale * survive
        if left <= 0.0:
            return
        yield v, min(1.0, scale * survive * chance / left), law
        survive *= 1.0 - chance


#: Stands for a point-mass trial proposal :math:`\delta_x` (the conditional step's held
#: children) in :func:`_lazy_trials`: never built as a ``(V,)`` array.
_POINT = object()


class _Scaled:
    """A traversal trial proposal ``left / total`` not built yet: calling it writes it into
    ``out`` (``np.divide``) and returns it -- or returns ``left`` itself when that is the law
    ``q`` and ``total`` is exactly 1."""

    __slots__ = ("left", "out", "total", "whole")

    def __init__(self, left: np.ndarray, total: float, out: np.ndarray, whole: bool) -> None:
        self.left, self.total, self.out, self.whole = left, total, out, whole

    def __call__(self) -> np.ndarray:
        if self.whole:
            return self.left
        return np.divide(self.left, self.total, out=self.out)

_POOL = threading.local()
#: Free ``(V,)`` work arrays kept per thread at most.
_POOL_KEEP = 64


def _take(n: int) -> np.ndarray:
    """A float64 ``(n,)`` work array, from this thread's free list if one fits.

    Why: at ``V = 32768`` a fresh array is 256 KB, and glibc hands a freed heap top back to
    the OS, so the next one page-faults in again (~60 faults); a tree's run needs a few per
    node. Every :func:`_take` is matched by a :func:`_give` once the array is dead, so
    nested or interleaved runs never share one.
    """
    free = getattr(_POOL, "free", None)
    if free:
        for i in range(len(free) - 1, -1, -1):
            if free[i].size == n:
                return free.pop(i)
    return np.empty(n)


def _give(*bufs: np.ndarray | None) -> None:
    """Return work arrays to this thread's free list (None entries are skipped)."""
    free = getattr(_POOL, "free", None)
    if free is None:
        free = _POOL.free = []
    for buf in bufs:
        if buf is not None and len(free) < _POOL_KEEP:
            free.append(buf)


def _lazy_trials(step: str, q: np.ndarray, tokens: np.ndarray, scratch: np.ndarray,
                 q_sum: float | None = None) -> Iterator[tuple[int, float, object]]:
    """:func:`~treespec_sim.verify.univer.trials` without building a proposal no one reads.

    Yields ``(position, rho[x], rho)`` in trial order, where ``rho`` is the trial proposal
    (an array), a callable that writes it into ``scratch`` and returns it (read it before
    resuming: the next trial overwrites it), or :data:`_POINT`. ``rho[x]`` is the tried
    child's entry, the same float as the array's. The traversal and conditional steps are
    built here (the same floats as ``trials``: ``left / left.sum()`` with the tokens drawn
    before zeroed, in a pooled work array); the others come from ``trials`` as they are.
    ``q_sum``, if given, is ``q.sum()`` (the builder's law statistics: the same float), so the
    first traversal trial need not read ``q`` for it; and a first trial whose total is exactly
    1.0 is ``q`` itself (``q / 1.0`` is ``q``; read-only, like every trial proposal).
    """
    k = tokens.size
    if step == "traversal" or k == 1:
        left = q  # copied only when a draw has to be taken out of it
        try:
            for i, x in enumerate(tokens.tolist()):
                total = q_sum if (i == 0 and q_sum is not None) else left.sum()
                yield i, left[x] / total, _Scaled(left, total, scratch,
                                                  left is q and total == 1.0)
                if i + 1 < k:
                    if left is q:
                        left = _take(q.size)
                        np.copyto(left, q)
                    left[x] = 0.0
        finally:
            if left is not q:
                _give(left)
        return
    if step == "conditional":
        q_last = _take(q.size)
        try:
            np.copyto(q_last, q)
            q_last[tokens[:-1]] = 0.0
            total = q_last.sum()
            yield k - 1, q_last[int(tokens[-1])] / total, \
                (lambda: np.divide(q_last, total, out=scratch))
        finally:
            _give(q_last)
        for i in range(k - 1):
            yield i, 1.0, _POINT
        return
    for pos, rho in trials(step, q, tokens):
        yield pos, rho[int(tokens[pos])], rho


def opportunities_with(tree: DraftTree, oracle: TargetOracle, proposal: np.ndarray, *,
                       step: str | Callable[[NodeView], str], scale_update,
                       laws: bool = True, _bonus: bool = True) -> Iterator[Opportunity]:
    """:func:`opportunities` with the scale update as a parameter (for proofs_check's
    known-buggy denominator); ``laws=False`` yields ``None`` for a leaf's bonus law and never
    reads a leaf's target row, ``_bonus=False`` (exact E[tau]) yields ``None`` for every bonus
    law and skips the last residual's normalisation.

    The recursion of the module docstring, from the root with :math:`s = 1` and
    :math:`r = p_0`: :meth:`_Walk.visit` picks a node's horizontal step,
    :meth:`_Walk.trials` tries its children in post-order, updating the node's residual after
    each failed trial (:func:`_trial_residual`, :func:`_run_over`), and ends with the node's
    own opportunity. The trial proposal is written into a work array shared by all nodes (used
    between child visits only); each node's residual lives in one array of its own for the
    node's run (a fresh one where it may be yielded as a bonus law, a pooled one otherwise),
    formed with its two masses in one compiled pass (:func:`_residual`, sums in a stated order).
    """
    walk = _Walk(tree, oracle, proposal, _chooser(step), scale_update,
                 laws=laws and _bonus, bonus=_bonus)
    try:
        yield from walk.visit(0, 1.0, np.asarray(oracle.row(0), np.float64))
    finally:
        walk.release()


def _chooser(step: str | Callable[[NodeView], str]) -> Callable[[NodeView], str]:
    """The horizontal-step chooser ``NodeView -> step`` for a rule name or a chooser."""
    if callable(step):
        return step
    if step in CHOOSERS:
        return CHOOSERS[step]
    raise ValueError(f"step must be one of {HORIZONTAL_STEPS}; got {step!r}")


def _trial_residual(r: np.ndarray, s: float, x: int, mu_x: float, rho, own: np.ndarray
                    ) -> tuple[float, float]:
    r"""After a failed trial of token ``x`` against ``rho`` (from :func:`_lazy_trials`): write
    the residual :math:`(s r - \rho)_+` into ``own`` (float64 ``(V,)``; ``r`` may be ``own``)
    and return its masses ``(Z, R)``, as :func:`_residual` forms them."""
    if rho is _POINT:
        # mu - delta_x is mu but at x, where it is mu_x - 1 < 0 (the trial failed): the
        # residual is mu with x zeroed, and (delta_x - mu)_+ is 1 - mu_x at x and 0.0
        # elsewhere, so its sum is exactly 1 - mu_x
        resid = np.multiply(r, s, out=own)  # s * r (r may be own: read first)
        resid[x] = 0.0
        return float(resid.sum()), float(1.0 - mu_x)
    if callable(rho):
        rho = rho()
    return _residual(r, s, np.asarray(rho, np.float64), own)


def _run_over(v: int, z_mass: float, r_mass: float) -> bool:
    """Whether node ``v``'s run is over after a failed trial with residual masses ``(Z, R)``:
    ``Z = 0`` deletes ``v`` for sure (whatever ``R`` is), ``R = 0`` means the trial could not
    fail. At the root ``Z = R`` (``s = 1``), so ``Z = 0 < R`` there is rounding gone wrong."""
    if z_mass <= _ZERO_MASS and v != 0:
        return True  # no target mass left at v: v is deleted for sure
    if r_mass <= _ZERO_MASS:
        return True  # rho <= mu everywhere: the trial could not fail
    if z_mass <= _ZERO_MASS:
        raise FloatingPointError("root residual vanished while reachable")
    return False


class _Walk:
    """One run of :func:`opportunities_with`: the tree and its target and proposal rows, the
    chooser and scale update, and the shared trial-proposal work array (taken on first use,
    handed back by :meth:`release`)."""

    __slots__ = ("bonus", "choose", "laws", "oracle", "paths", "proposal", "scale_update",
                 "scratch", "sizes", "stats", "tree")

    def __init__(self, tree: DraftTree, oracle: TargetOracle, proposal: np.ndarray,
                 choose: Callable[[NodeView], str], scale_update, *, laws: bool,
                 bonus: bool) -> None:
        self.tree, self.oracle, self.proposal = tree, oracle, proposal
        self.choose, self.scale_update = choose, scale_update
        self.laws, self.bonus = laws, bonus
        # each law's sum, as the builder computed it (read-only laws): saves a pass per node
        self.stats = proposal.law_stats if isinstance(proposal, ProposalRows) else None
        self.sizes = _subtree_sizes(tree)
        self.paths = [(), *tree.paths()]
        self.scratch: list[np.ndarray] = []  # [rho], taken on first use

    def release(self) -> None:
        """Hand the shared work array back to the pool."""
        _give(*self.scratch)

    def visit(self, v: int, s: float, r: np.ndarray | None) -> Iterator[Opportunity]:
        """Visit ``v`` with prefix acceptance ``s`` and target ``r`` (``None``: its target row,
        read only if needed): a leaf's opportunity, or its children's trials under the step
        its chooser picks (a coin step runs them at scale 1 behind a coin of ``s``)."""
        kids = self.tree.children(v)
        if not kids.size:  # a leaf's row is its bonus law only: read it when asked for
            yield v, s, r if self.laws else None
            return
        r = np.asarray(self.oracle.row(v), np.float64) if r is None else r
        view = NodeView(v, self.paths[v], s, r, self.proposal[v],
                        tuple(int(self.sizes[c]) for c in kids))
        chosen = self.choose(view)
        if chosen.startswith(COIN):
            chosen = chosen[len(COIN):]
            if s < 1.0:
                yield from _coin(s, self.trials(v, 1.0, r, kids, chosen))
                return
        yield from self.trials(v, s, r, kids, chosen)

    def trials(self, v: int, s: float, r: np.ndarray, kids: np.ndarray, chosen: str
               ) -> Iterator[Opportunity]:
        """Try ``v``'s children under step ``chosen`` (post-order: each child's subtree before
        the next trial), then ``v``'s own opportunity with what is left of ``s`` and ``r``."""
        tokens = self.tree.token[kids]
        if not self.scratch:
            self.scratch.append(_take(r.size))
        bonus, laws, oracle = self.bonus, self.laws, self.oracle
        own = None  # this node's residual array (r is the caller's until the first update)
        try:
            n_left = kids.size
            for pos, rho_x, rho in _lazy_trials(chosen, self.proposal[v], tokens,
                                                self.scratch[0], self._law_sum(v)):
                n_left -= 1
                child, x = int(kids[pos]), int(tokens[pos])
                mu_x = s * r[x]
                s_child = 1.0 if mu_x >= rho_x else mu_x / rho_x
                if s_child > 0.0:
                    yield from self.visit(child, s_child,
                                          np.asarray(oracle.row(child), np.float64) if laws
                                          else None)
                if s_child >= 1.0:
                    return  # a visit with s = 1 is never deleted: nothing after is reachable
                if own is None:
                    own = np.empty(r.size) if bonus else _take(r.size)
                z_mass, r_mass = _trial_residual(r, s, x, mu_x, rho, own)
                if _run_over(v, z_mass, r_mass):
                    return
                if bonus or n_left:  # the last residual is read only as v's bonus law
                    r = np.divide(own, z_mass, out=own)
                s = 1.0 if v == 0 else self.scale_update(z_mass, r_mass, rho_x)
            yield v, s, r if bonus else None
        finally:
            if not bonus:
                _give(own)  # never yielded: dead once the run is over

    def _law_sum(self, v: int) -> float | None:
        """``proposal[v].sum()`` as the builder computed it, or ``None`` if not recorded."""
        if self.stats is None:
            return None
        law = int(self.proposal.row_of[v])
        return self.stats[law][1] if law >= 0 else None


def traversal_sample(tree: DraftTree, oracle: TargetOracle, rng: np.random.Generator,
                     proposal: np.ndarray, *, step: str | Callable[[NodeView], str]
                     ) -> Outcome:
    """Sample one round (``step``: a rule of :data:`HORIZONTAL_STEPS` or a chooser)."""
    for v, chance, bonus_law in _chances(tree, oracle, proposal, step=step):
        if chance >= 1.0 or rng.random() < chance:
            if bonus_law is None:  # a leaf: its bonus law is its target row
                bonus_law = np.asarray(oracle.row(v), np.float64)
            return Outcome.from_path(tree, tree.path_nodes(v), sample_categorical(bonus_law, rng))
    raise AssertionError("the root's opportunity has chance 1")  # pragma: no cover


def emission_weights(opps: Iterator[tuple[int, float, np.ndarray]]
                     ) -> Iterator[tuple[int, float, np.ndarray]]:
    r"""Turn opportunities into ``(node, P(the round ends here), bonus law)``, stopping once the
    remaining probability is zero: :math:`P_j = \prod_{i<j}(1 - c_i)\,c_j`."""
    reach = 1.0
    for v, chance, bonus_law in opps:
        yield v, reach * chance, bonus_law
        reach *= 1.0 - chance
        if reach <= 0.0:
            return


def traversal_expected_length(tree: DraftTree, oracle: TargetOracle, proposal: np.ndarray, *,
                              step: str | Callable[[NodeView], str]) -> float:
    r"""Exact :math:`E[\tau]` over the verifier's coins, tokens fixed."""
    opps = _emission_chances(tree, oracle, proposal, step=step)
    return sum(w * (1.0 + float(tree.depth[v])) for v, w, _ in emission_weights(opps))


def round_law_from(tree: DraftTree, opps: Iterator[tuple[int, float, np.ndarray]]
                   ) -> dict[tuple[int, ...], float]:
    """Exact law of the emitted tokens ``(path tokens..., bonus)`` from a run's opportunities."""
    paths = [(), *tree.paths()]
    law: dict[tuple[int, ...], float] = {}
    for v, weight, bonus_law in emission_weights(opps):
        if weight > 0.0:
            for y in np.flatnonzero(bonus_law > 0):
                key = (*paths[v], int(y))
                law[key] = law.get(key, 0.0) + weight * float(bonus_law[y])
    return law


def traversal_round_law(tree: DraftTree, oracle: TargetOracle, proposal: np.ndarray, *,
                        step: str | Callable[[NodeView], str]) -> dict[tuple[int, ...], float]:
    """Exact law of the emitted tokens ``(path tokens..., bonus)`` for fixed drafted tokens."""
    return round_law_from(tree, opportunities(tree, oracle, proposal, step=step))
