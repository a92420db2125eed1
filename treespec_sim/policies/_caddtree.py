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
from ..validation import check_budget, check_log_q, check_real, check_root_token
from ._ddtree import build_nodes as _ddtree_build
from ._ddtree import ddtree
from ._ddtree import trusted_tree as _ddtree_tree

__all__ = [
    "BudgetCurve",
    "CaDDTreePolicy",
    "LongRunPolicy",
    "budget_curve",
    "caddtree",
    "exhaustive_budget_tree",
    "first_non_increase",
    "longrun_budget",
    "longrun_tree",
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


def _costs(draft_cost: float, verify_cost: VerifyCost, max_tokens: int) -> np.ndarray:
    """:math:`D(B)` (:func:`treespec_sim.cost.round_cost`) for ``B = 0..max_tokens - 1``,
    float64 (max_tokens,), validated."""
    cd = check_real(draft_cost, "draft_cost")
    if not callable(verify_cost):
        raise ValueError("verify_cost must be a callable n_tokens -> seconds")
    total = cost.round_cost(cd, lambda n: _verify_costs(verify_cost, n), np.arange(max_tokens))
    if total[0] <= 0:
        raise ValueError("draft_cost + verify_cost(1) must be > 0 (a round takes time)")
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
    lp, row_max = check_log_q(log_q)
    max_budget = check_budget(max_budget, "max_budget")
    root_token = check_root_token(root_token, vocab_size=lp.shape[1])
    if start_budget is None:
        b = max_budget
    else:
        b = min(max_budget, max(1, check_budget(start_budget, "start_budget")))
    while True:
        # ddtree's builder on the already validated array (one read of it saved per trial)
        tree = _ddtree_tree(*_ddtree_build(lp, row_max, b), root_token) if b else \
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
