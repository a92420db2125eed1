r"""Cost-aware budgets over DDTree's nested trees: CaDDTree, exhaustive, long-run.

DDTree's heap pops prefixes in order of non-increasing surrogate probability
:math:`p_1 \ge p_2 \ge \dots`; the tree of budget ``B`` is the first ``B`` pops, so the trees
are nested. With a draft cost :math:`C_d` and a verification cost :math:`C_v(n)` for ``n`` query
tokens (root included), one round of budget ``B`` is expected (under the surrogate) to yield

.. math::
    N(B) = 1 + \sum_{i \le B} p_i \text{ tokens in } D(B) = C_d + C_v(B + 1)\text{ seconds},
    \qquad \theta(B) = N(B) / D(B).

Three rules choose ``B`` (``docs/theory/caddtree.md`` has the proofs):

:func:`caddtree`
    CaDDTree (Zhang et al., arXiv 2606.01813; reference ``build_caddtree_tree``): pop while the
    next node raises :math:`\theta`, i.e. while :math:`p_{B+1} > \theta(B)\,\Delta_{B+1}` with
    :math:`\Delta_{B+1} = C_v(B+2) - C_v(B+1)`; ties stop. Under convex :math:`C_v` the stop is
    the smallest global maximiser of :math:`\theta` (it is unimodal: concave over convex).
:func:`exhaustive_budget_tree`
    pop to ``max_budget`` and take the smallest argmax of :math:`\theta` over all ``B``: exact for
    any cost, including the non-convex step costs where the greedy stop can be a strict local
    maximum.
:func:`longrun_tree`
    Dinkelbach's rule for long-run throughput :math:`E[N]/E[D]` (renewal-reward): add a node iff
    :math:`p_{B+1} > \lambda\,\Delta_{B+1}` for one global :math:`\lambda` (the throughput the
    decoder achieves); :class:`LongRunPolicy` estimates it as a running ratio.

For a batch, :func:`batch_caddtree` shares one budget across the requests' trees: best-first
over the union of their DDTree pops (:func:`merge_candidates`), stopped by the same rule with
the batch's costs :math:`D = C_d + C_v(\sum_i (B_i + 1))` (``docs/theory/batch_caddtree.md``);
:func:`batch_exhaustive` takes the argmax over every total instead.

Implementation: the heap's pops are DDTree's node order, so each rule builds
``ddtree(log_q, max_budget)`` once, evaluates :math:`\theta` for every prefix in one vectorised
pass, and keeps the chosen prefix (a prefix of the pop order is always a valid tree).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from .. import cost
from ..cost import VerifyCost
from ..paths import LogQ, path_probabilities
from ..tree import DraftTree, prefix_tree
from ..validation import (
    check_budget,
    check_log_q,
    check_log_qs,
    check_real,
    check_root_token,
    check_root_tokens,
)
from ._ddtree import build_nodes as _ddtree_build
from ._ddtree import ddtree
from ._ddtree import trusted_tree as _ddtree_tree

__all__ = [
    "BatchCurve",
    "BudgetCurve",
    "CaDDTreePolicy",
    "LongRunPolicy",
    "batch_budget_curve",
    "batch_caddtree",
    "batch_exhaustive",
    "budget_curve",
    "caddtree",
    "exhaustive_budget_tree",
    "first_non_increase",
    "longrun_budget",
    "longrun_tree",
    "merge_candidates",
    "merge_pops",
]

#: The default largest budget (CaDDTree's reference uses ``min(1024, V)``).
DEFAULT_MAX_BUDGET = 1024


@dataclass(frozen=True)
class BudgetCurve:
    r"""Everything a budget rule needs, for budgets ``0..max_budget``.

    Attributes
    ----------
    tree : DraftTree
        DDTree at ``max_budget`` (node ``i`` = ``i``-th pop).
    p : ndarray, shape (n,)
        Surrogate path probability of pops ``1..n`` (non-increasing).
    round_cost : ndarray, shape (n + 1,)
        :math:`D(B) = C_d + C_v(B + 1)` for ``B = 0..n``, seconds.
    """

    tree: DraftTree
    p: np.ndarray
    round_cost: np.ndarray

    @property
    def expected_tokens(self) -> np.ndarray:
        """:math:`N(B) = 1 + \\sum_{i \\le B} p_i` for ``B = 0..n``."""
        return np.concatenate([[1.0], 1.0 + np.cumsum(self.p)])

    @property
    def theta(self) -> np.ndarray:
        r""":math:`\theta(B) = N(B) / D(B)` for ``B = 0..n`` (surrogate tokens per second)."""
        return self.expected_tokens / self.round_cost


def _verify_costs(verify_cost: VerifyCost, n: np.ndarray) -> np.ndarray:
    """``verify_cost`` at the token counts ``n`` (int array), float64, validated: one call on
    the array, or one per element if the callable only takes scalars."""
    try:
        cv = np.asarray(verify_cost(n), dtype=np.float64)
        if cv.shape != n.shape:
            raise TypeError
    except (TypeError, ValueError):  # a scalar-only callable
        cv = np.array([float(verify_cost(int(k))) for k in n])
    bad = np.flatnonzero(~np.isfinite(cv) | (cv < 0))
    if bad.size:
        k = int(n[bad[0]])
        raise ValueError(f"verify_cost({k}) = {cv[bad[0]]!r}: costs must be finite and >= 0")
    dec = np.flatnonzero(np.diff(cv) < 0)
    if dec.size:
        k = int(n[dec[0]])
        raise ValueError(f"verify_cost must be non-decreasing: verify_cost({k + 1}) = "
                         f"{cv[dec[0] + 1]!r} < verify_cost({k}) = {cv[dec[0]]!r}")
    return cv


def _costs(draft_cost: float, verify_cost: VerifyCost, max_tokens: int, *,
           batch_size: int = 1) -> np.ndarray:
    """:math:`D(B)` (:func:`treespec_sim.cost.round_cost`) for ``B = 0..max_tokens - 1``
    nodes in all (``batch_size`` roots besides), float64 (max_tokens,), validated."""
    cd = check_real(draft_cost, "draft_cost")
    if not callable(verify_cost):
        raise ValueError("verify_cost must be a callable n_tokens -> seconds")
    total = cost.round_cost(cd, lambda n: _verify_costs(verify_cost, n), np.arange(max_tokens),
                            batch_size=batch_size)
    if total[0] <= 0:
        raise ValueError(f"draft_cost + verify_cost({batch_size}) must be > 0 (a round takes "
                         "time)")
    return total


def budget_curve(log_q: LogQ, *, draft_cost: float, verify_cost: VerifyCost, max_budget: int,
                 root_token: int = -1) -> BudgetCurve:
    """DDTree at ``max_budget`` with its pop probabilities and round costs for every prefix."""
    lp, _ = check_log_q(log_q)
    max_budget = check_budget(max_budget, "max_budget")
    root_token = check_root_token(root_token, vocab_size=lp.shape[1])
    tree = ddtree(lp, max_budget, root_token=root_token)
    p = path_probabilities(tree, lp)
    return BudgetCurve(tree, p, _costs(draft_cost, verify_cost, tree.size + 1))


def first_non_increase(theta: np.ndarray) -> int:
    r"""CaDDTree's stop: the largest ``B`` with :math:`\theta(0) < \dots < \theta(B)`.

    That is, the first ``B`` whose successor does not raise :math:`\theta` (ties stop), or the
    last index if :math:`\theta` rises throughout.
    """
    theta = np.asarray(theta, dtype=np.float64)
    falls = np.flatnonzero(theta[1:] <= theta[:-1])
    return int(falls[0]) if falls.size else int(theta.size - 1)


def _grow_until_stop(log_q: LogQ, *, draft_cost: float, verify_cost: VerifyCost, max_budget: int,
                     root_token: int, start_budget: int | None,
                     stop: Callable[[np.ndarray, np.ndarray], int],
                     round_cost: np.ndarray | None = None) -> DraftTree:
    """Build DDTree at a trial budget, apply a prefix-decidable stop rule, grow if needed.

    ``round_cost`` (optional, validated ``D(0..max_budget)``) skips evaluating the cost model.
    ``stop(p, round_cost)`` returns the chosen budget given the first ``b`` pops. It is exact
    as soon as it stops strictly inside the trial tree (the trees are nested, so the first ``b``
    pops of any bigger tree are the same), or when the trial already is ``max_budget`` or holds
    every prefix; otherwise the trial budget doubles.
    """
    lp, _ = check_log_q(log_q)
    max_budget = check_budget(max_budget, "max_budget")
    root_token = check_root_token(root_token, vocab_size=lp.shape[1])
    if start_budget is None:
        b = max_budget
    else:
        b = min(max_budget, max(1, check_budget(start_budget, "start_budget")))
    while True:
        # ddtree's builder on the already validated array (one read of it saved per trial)
        tree = _ddtree_tree(*_ddtree_build(lp, b), root_token) if b else \
            DraftTree.root_only(root_token)
        p = path_probabilities(tree, lp)
        costs = (round_cost[: tree.size + 1] if round_cost is not None
                 else _costs(draft_cost, verify_cost, tree.size + 1))
        chosen = stop(p, costs)
        if chosen < tree.size or tree.size < b or b >= max_budget:
            return prefix_tree(tree, chosen)
        b = min(max_budget, 2 * b)


def caddtree(log_q: LogQ, *, draft_cost: float, verify_cost: VerifyCost,
             max_budget: int = DEFAULT_MAX_BUDGET, root_token: int = -1,
             start_budget: int | None = None) -> DraftTree:
    r"""CaDDTree: DDTree's best-first tree, stopped at the first node that does not raise
    :math:`\theta(B) = N(B) / D(B)`.

    Parameters
    ----------
    log_q : array_like of float, shape (L, V)
        Drafter log-probabilities at depths ``1..L``.
    draft_cost : float
        :math:`C_d`, seconds per drafter forward.
    verify_cost : callable
        ``verify_cost(n_tokens) -> seconds`` for one verification forward over ``n_tokens``
        query tokens, root included (a tree of ``B`` nodes costs ``verify_cost(B + 1)``).
        Called with an int array ``1..b + 1`` (or per element if it only takes scalars). Must be
        non-negative and non-decreasing.
    max_budget : int
        Largest budget considered (default 1024, as the reference).
    root_token : int
        Token stored at the root.
    start_budget : int, optional
        First trial budget (e.g. the previous round's stop plus a margin). The result does not
        depend on it; only the work does: DDTree is built at the trial budget and rebuilt at
        twice that only if the stop lies beyond it. Default: build at ``max_budget`` once.

    Returns
    -------
    DraftTree
        ``ddtree(log_q, B*)`` with :math:`B^*` the stop; under convex ``verify_cost`` the
        smallest maximiser of :math:`\theta` over ``0..max_budget``
        (``proofs_check`` theorem ``caddtree=exhaustive[convex]``).

    Raises
    ------
    ValueError
        Bad ``log_q``/``max_budget``/``root_token``; negative, non-finite or decreasing costs.
    """
    return _grow_until_stop(log_q, draft_cost=draft_cost, verify_cost=verify_cost,
                            max_budget=max_budget, root_token=root_token,
                            start_budget=start_budget, stop=_caddtree_stop)


def _caddtree_stop(p: np.ndarray, round_cost: np.ndarray) -> int:
    return first_non_increase(np.concatenate([[1.0], 1.0 + np.cumsum(p)]) / round_cost)


class CaDDTreePolicy:
    """:func:`caddtree` for a decoder: each round starts from the previous stop (times
    ``margin``), so the tree is usually built once at about its final size.

    Same result as :func:`caddtree` every round; ``last_budget`` is the decoder's state.
    """

    def __init__(self, *, draft_cost: float, verify_cost: VerifyCost,
                 max_budget: int = DEFAULT_MAX_BUDGET, margin: float = 1.1) -> None:
        self.draft_cost, self.verify_cost = draft_cost, verify_cost
        self.max_budget = check_budget(max_budget, "max_budget")
        self.margin = check_real(margin, "margin", minimum=1.0)
        self.last_budget: int | None = None
        # D(0..max_budget), evaluated and validated once (the cost model is fixed)
        self._round_cost = _costs(draft_cost, verify_cost, self.max_budget + 1)

    def __call__(self, log_q: LogQ, budget: int | None = None, *, root_token: int = -1
                 ) -> DraftTree:
        """This round's tree (``budget``, at most ``max_budget``, overrides it if given)."""
        max_budget = self.max_budget if budget is None else min(
            check_budget(budget), self.max_budget)
        start = None if self.last_budget is None else int(self.margin * self.last_budget) + 4
        tree = _grow_until_stop(log_q, draft_cost=self.draft_cost, verify_cost=self.verify_cost,
                                max_budget=max_budget, root_token=root_token,
                                start_budget=start, stop=_caddtree_stop,
                                round_cost=self._round_cost)
        self.last_budget = tree.size
        return tree


def exhaustive_budget_tree(log_q: LogQ, *, draft_cost: float, verify_cost: VerifyCost,
                           max_budget: int = DEFAULT_MAX_BUDGET, root_token: int = -1
                           ) -> DraftTree:
    r"""The prefix with the largest :math:`\theta` over every budget ``0..max_budget`` (the
    smallest such budget on ties). Exact for non-convex costs; same arguments as
    :func:`caddtree`."""
    curve = budget_curve(log_q, draft_cost=draft_cost, verify_cost=verify_cost,
                         max_budget=max_budget, root_token=root_token)
    return prefix_tree(curve.tree, int(np.argmax(curve.theta)))


def longrun_budget(p: np.ndarray, round_cost: np.ndarray, lam: float) -> int:
    r"""Dinkelbach's stop: the largest ``B`` with :math:`p_i > \lambda\,\Delta_i` for all
    :math:`i \le B`, where :math:`\Delta_i = D(i) - D(i-1)`.

    With non-increasing ``p`` and convex costs the increments of :math:`N - \lambda D` fall, so
    this ``B`` maximises :math:`N(B) - \lambda D(B)` (the smallest maximiser).
    """
    lam = check_real(lam, "lam")
    gains = np.asarray(p) - lam * np.diff(np.asarray(round_cost))
    stops = np.flatnonzero(gains <= 0)
    return int(stops[0]) if stops.size else len(p)


def longrun_tree(log_q: LogQ, *, lam: float, draft_cost: float, verify_cost: VerifyCost,
                 max_budget: int = DEFAULT_MAX_BUDGET, root_token: int = -1) -> DraftTree:
    r"""DDTree stopped by the long-run rule :math:`p_{B+1} > \lambda\,\Delta_{B+1}`.

    ``lam`` is the target long-run throughput :math:`\lambda^*` in tokens per second (the
    optimum of :math:`E[N]/E[D]` over stationary budget rules; Dinkelbach 1967). Other arguments
    as :func:`caddtree`.
    """
    lam = check_real(lam, "lam")
    return _grow_until_stop(log_q, draft_cost=draft_cost, verify_cost=verify_cost,
                            max_budget=max_budget, root_token=root_token, start_budget=None,
                            stop=lambda p, costs: longrun_budget(p, costs, lam))


class LongRunPolicy:
    r"""The long-run rule with :math:`\lambda` estimated online as the running throughput.

    Before any round, :math:`\lambda` is the autoregressive rate :math:`1 / D(0)` of the first
    round seen; after each round, ``observe(tokens, seconds)`` updates it to (total tokens) /
    (total seconds). Mutable by design: it is a decoder's state, not a value.

    Parameters
    ----------
    draft_cost, verify_cost, max_budget
        As :func:`caddtree`.
    prior_rounds : float
        Weight, in rounds, of the initial estimate (keeps the first rounds from swinging).
    """

    def __init__(self, *, draft_cost: float, verify_cost: VerifyCost,
                 max_budget: int = DEFAULT_MAX_BUDGET, prior_rounds: float = 1.0) -> None:
        self.draft_cost = draft_cost
        self.verify_cost = verify_cost
        self.max_budget = check_budget(max_budget, "max_budget")
        self.prior_rounds = check_real(prior_rounds, "prior_rounds", strict=True)
        self.tokens = 0.0
        self.seconds = 0.0

    @property
    def lam(self) -> float | None:
        """Current throughput estimate (tokens per second), or None before any round."""
        return self.tokens / self.seconds if self.seconds > 0 else None

    def choose(self, curve: BudgetCurve) -> int:
        """The budget for a round with this curve."""
        return self.choose_from(curve.p, curve.round_cost)

    def choose_from(self, p: np.ndarray, round_cost: np.ndarray) -> int:
        """The budget for a round with pop probabilities ``p`` and costs ``D(0..n)``; the first
        call seeds :math:`\\lambda` with the autoregressive-like rate ``1 / D(0)``."""
        if self.seconds == 0:
            self.tokens = self.prior_rounds * 1.0
            self.seconds = self.prior_rounds * float(round_cost[0])
        return longrun_budget(p, round_cost, self.lam)

    def observe(self, tokens: float, seconds: float) -> None:
        """Record a finished round: tokens committed and seconds spent."""
        if not (seconds > 0 and tokens >= 0):
            raise ValueError(f"observe needs tokens >= 0 and seconds > 0; got {tokens}, "
                             f"{seconds}")
        self.tokens += float(tokens)
        self.seconds += float(seconds)

    def __call__(self, log_q: LogQ, budget: int | None = None, *, root_token: int = -1
                 ) -> DraftTree:
        """Build this round's tree (``budget`` overrides ``max_budget`` if given)."""
        max_budget = self.max_budget if budget is None else budget
        curve = budget_curve(log_q, draft_cost=self.draft_cost, verify_cost=self.verify_cost,
                             max_budget=max_budget, root_token=root_token)
        return prefix_tree(curve.tree, self.choose(curve))


# ------------------------------------------------------------------------ one budget, a batch
@dataclass(frozen=True)
class BatchCurve:
    r"""A batch's candidate nodes, best first over all its requests, with the batch's costs.

    Every request ``i`` brings an ordered list of candidates whose surrogate probabilities
    :math:`p_{i,1} \ge p_{i,2} \ge \dots` never increase (DDTree's pops; a chain's positions),
    so that any prefix of its list is a tree. The union's pop ``k`` is the ``k``-th largest of all
    the lists' probabilities (ties: the smaller request index, then the list order), so the
    first ``k`` pops of the union hold a prefix of every request's list. With ``K`` pops of
    ``b`` requests, one round verifying the first ``k`` is expected (under the surrogate) to
    yield :math:`N(k) = b + \sum_{j \le k} p_{(j)}` tokens in
    :math:`D(k) = C_d + C_v(b + k)` seconds (``docs/theory/batch_caddtree.md``).

    Attributes
    ----------
    trees : tuple of DraftTree, length b (or empty)
        Each request's candidates as a tree, node ``j`` its ``j``-th candidate; empty for a
        curve merged from the probabilities alone (:func:`merge_pops`: budgets, no trees).
    p : ndarray, shape (K,)
        The union's pop probabilities, non-increasing.
    owner : ndarray of int64, shape (K,)
        The request of each pop.
    round_cost : ndarray, shape (K + 1,)
        :math:`D(k)` for ``k = 0..K`` nodes in all, seconds.
    batch_size : int
        ``b``, the requests.
    """

    trees: tuple[DraftTree, ...]
    p: np.ndarray
    owner: np.ndarray
    round_cost: np.ndarray
    batch_size: int

    @property
    def expected_tokens(self) -> np.ndarray:
        """:math:`N(k) = b + \\sum_{j \\le k} p_{(j)}` for ``k = 0..K``."""
        b = float(self.batch_size)
        return np.concatenate([[b], b + np.cumsum(self.p)])

    @property
    def theta(self) -> np.ndarray:
        r""":math:`\theta(k) = N(k) / D(k)` for ``k = 0..K`` (the batch's surrogate tokens per
        second)."""
        return self.expected_tokens / self.round_cost

    def budgets(self, k: int) -> np.ndarray:
        """Each request's nodes among the union's first ``k`` pops, int64 (b,)."""
        return np.bincount(self.owner[:k], minlength=self.batch_size).astype(np.int64)

    def trees_at(self, k: int) -> list[DraftTree]:
        """The batch's trees when the union's first ``k`` pops are verified."""
        if len(self.trees) != self.batch_size:
            raise ValueError("this curve was merged from probabilities alone: it has budgets "
                             "(budgets(k)), no trees")
        return [prefix_tree(t, int(n)) for t, n in zip(self.trees, self.budgets(k),
                                                        strict=True)]


def merge_candidates(trees, pops, *, draft_cost: float, verify_cost: VerifyCost
                     ) -> BatchCurve:
    r"""The union of a batch's candidate lists, best first (:class:`BatchCurve`).

    Parameters
    ----------
    trees : sequence of DraftTree, length b
        Each request's candidates, node ``j`` the ``j``-th (a prefix of the node order must be
        the tree a smaller budget gives: DDTree's trees, chains).
    pops : sequence of ndarray, shape (trees[i].size,)
        Each request's surrogate probabilities in node order, non-increasing.
    draft_cost : float
        The batch's drafting seconds per round.
    verify_cost : callable
        ``verify_cost(n) -> seconds`` of one verification pass over ``n`` query tokens in all
        (every request's root counted), non-negative and non-decreasing.

    Returns
    -------
    BatchCurve
    """
    if len(trees) != len(pops) or any(t.size != len(q) for t, q in zip(trees, pops, strict=True)):
        raise ValueError("trees and pops must match: one probability per candidate node")
    return merge_pops(pops, draft_cost=draft_cost, verify_cost=verify_cost,
                      trees=tuple(trees))


def merge_pops(pops, *, draft_cost: float, verify_cost: VerifyCost,
               trees: tuple[DraftTree, ...] = ()) -> BatchCurve:
    """The union of a batch's candidate lists from their probabilities alone (each request's
    surrogate increments in pop order: a nested round's ``np.diff(surrogate_curve)``), for
    rules that need the budgets and not the trees; arguments as :func:`merge_candidates`."""
    b = len(pops)
    sizes = np.array([len(q) for q in pops], dtype=np.int64)
    p = np.concatenate([np.asarray(q, dtype=np.float64) for q in pops]) if b else np.zeros(0)
    owner = np.repeat(np.arange(b, dtype=np.int64), sizes)
    pos = np.concatenate([np.arange(n, dtype=np.int64) for n in sizes]) if b else owner
    # order by the running minimum of each list: a rounding rise inside one request's list
    # cannot put a node before its own predecessor (the lists are non-increasing in exact
    # arithmetic); the sums use the probabilities themselves
    key = np.concatenate([np.minimum.accumulate(np.asarray(q, dtype=np.float64))
                          for q in pops]) if b else p
    order = np.lexsort((pos, owner, -key))
    return BatchCurve(trees, p[order], owner[order],
                      _costs(draft_cost, verify_cost, int(sizes.sum()) + 1, batch_size=b), b)


def batch_budget_curve(log_qs, *, draft_cost: float, verify_cost: VerifyCost, max_budget: int,
                       root_tokens=None) -> BatchCurve:
    """Every request's DDTree at ``max_budget`` and their union, best first, with the batch's
    round costs (arguments as :func:`batch_caddtree`)."""
    checked = check_log_qs(log_qs)
    max_budget = check_budget(max_budget, "max_budget")
    roots = check_root_tokens(root_tokens, [lp.shape[1] for lp, _ in checked])
    check_real(draft_cost, "draft_cost")
    trees, pops = [], []
    for (lp, _), root in zip(checked, roots, strict=True):
        # ddtree's builder on the already validated array (each request read once)
        tree = _ddtree_tree(*_ddtree_build(lp, max_budget), root)
        trees.append(tree)
        pops.append(path_probabilities(tree, lp))
    return merge_candidates(trees, pops, draft_cost=draft_cost, verify_cost=verify_cost)


def batch_caddtree(log_qs, *, draft_cost: float, verify_cost: VerifyCost, max_budget: int,
                   root_tokens=None) -> list[DraftTree]:
    r"""One budget shared across a batch: the trees that maximise the batch's surrogate tokens
    per second.

    Best-first over the union of the requests' DDTree candidates, stopped by CaDDTree's rule:
    the union's next pop is taken while it raises

    .. math:: \theta = \frac{\sum_i E_q[\tau_i]}{C_d + C_v\bigl(\sum_i (B_i + 1)\bigr)},

    i.e. while :math:`p_{(k+1)} > \theta(k)\,\bigl(C_v(b + k + 1) - C_v(b + k)\bigr)`; ties stop.
    For every total ``k`` the union's first ``k`` pops maximise the surrogate over all budget
    vectors with that total, and under a convex ``verify_cost`` the stop maximises
    :math:`\theta` over all budget vectors (``docs/theory/batch_caddtree.md``; ``proofs_check``
    rows ``batch_union_optimal``, ``batch_caddtree=exhaustive[convex]``). With one request it
    is :func:`caddtree`, tree for tree.

    Parameters
    ----------
    log_qs : sequence of array_like, each shape (L_i, V_i)
        Each request's drafter log-probabilities at depths ``1..L_i``.
    draft_cost : float
        :math:`C_d`, the batch's drafting seconds per round.
    verify_cost : callable
        ``verify_cost(n) -> seconds`` of one verification pass over ``n`` query tokens in all,
        every request's root counted (``n = sum_i (B_i + 1)``); called with an int array
        (or per element if it takes scalars only); non-negative and non-decreasing.
    max_budget : int
        The largest tree of any one request.
    root_tokens : sequence of int, optional
        Each request's root token (default ``-1``, unknown).

    Returns
    -------
    list of DraftTree, length b
        Request ``i``'s tree: ``ddtree(log_qs[i], B_i)`` (the root alone for ``B_i = 0``).

    Raises
    ------
    ValueError
        An empty batch, a bad request's ``log_q`` (named ``log_qs[i]``), a bad ``max_budget``
        or root token; negative, non-finite or decreasing costs.

    Examples
    --------
    >>> import numpy as np
    >>> easy = np.log([[0.9, 0.1], [0.9, 0.1]])
    >>> hard = np.log([[0.5, 0.5], [0.5, 0.5]])
    >>> trees = batch_caddtree([easy, hard], draft_cost=1.0,
    ...                        verify_cost=lambda n: 1.0 + 0.2 * n, max_budget=4)
    >>> [t.size for t in trees]
    [2, 2]
    """
    curve = batch_budget_curve(log_qs, draft_cost=draft_cost, verify_cost=verify_cost,
                               max_budget=max_budget, root_tokens=root_tokens)
    return curve.trees_at(first_non_increase(curve.theta))


def batch_exhaustive(log_qs, *, draft_cost: float, verify_cost: VerifyCost, max_budget: int,
                     root_tokens=None) -> list[DraftTree]:
    r"""The union's prefix with the largest :math:`\theta` over every total (the smallest
    such total on ties): the best budget vector for any non-decreasing cost, tiled ones
    included (for each total the union is optimal); arguments as :func:`batch_caddtree`."""
    curve = batch_budget_curve(log_qs, draft_cost=draft_cost, verify_cost=verify_cost,
                               max_budget=max_budget, root_tokens=root_tokens)
    return curve.trees_at(int(np.argmax(curve.theta)))
