r"""Cost-aware budgets (CaDDTree) as executable checks.

Notation (``docs/theory/caddtree.md``): DDTree pops prefixes with surrogate probabilities
:math:`p_1 \ge p_2 \ge \dots`; :math:`N(B) = 1 + \sum_{i\le B} p_i`,
:math:`D(B) = C_d + C_v(B+1)`, :math:`\theta(B) = N(B)/D(B)`.

Every :math:`\theta` here is computed *independently* of the package's vectorised scan: each
budget's tree is rebuilt from scratch (``ddtree(log_q, B)``) and its surrogate summed, so a
wrong prefix, a wrong off-by-one in the token count or a wrong tie rule shows up as a
violation.

Also here: the automatic search for a step (tiled) cost under which CaDDTree's greedy stop is a
strict local maximum of :math:`\theta`, smallest instance first; and the batch's shared budget
(``batch_caddtree``, ``docs/theory/batch_caddtree.md``) checked against every budget vector of
small batches, each request's tree rebuilt for each of its budgets.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from treespec_sim import DraftTree
from treespec_sim.cost import TiledCost
from treespec_sim.exits import reach_probabilities
from treespec_sim.policies import (
    batch_budget_curve,
    batch_caddtree,
    caddtree,
    ddtree,
    longrun_budget,
)
from treespec_sim.surrogate import surrogate_length

from .reference import caddtree_heap_reference

__all__ = [
    "BATCH_STEP_INSTANCE",
    "StepCounterexample",
    "batch_instances",
    "batch_step_loss",
    "batch_vector_table",
    "find_step_counterexample",
    "random_convex_costs",
    "random_log_q",
    "theta_by_rebuilding",
]


#: Relative slack on theta comparisons between independently rounded computations.
THETA_RTOL = 1e-12


def random_log_q(rng: np.random.Generator, *, max_depth: int = 4, max_vocab: int = 6
                 ) -> np.ndarray:
    """Drafter log-marginals ``(L, V)``; some rows have tied values, some exact zeros."""
    L = int(rng.integers(1, max_depth + 1))
    V = int(rng.integers(2, max_vocab + 1))
    rows = []
    for _ in range(L):
        u = rng.random()
        if u < 0.3:  # ties
            p = rng.choice([1.0, 2.0, 4.0], size=V)
        elif u < 0.5:  # exact zeros
            p = rng.dirichlet(np.ones(V)) * (rng.random(V) < 0.7)
            if p.sum() == 0:
                p[0] = 1.0
        else:
            p = rng.dirichlet(np.full(V, float(rng.choice([0.2, 1.0, 5.0]))))
        with np.errstate(divide="ignore"):
            rows.append(np.log(p / p.sum()))
    return np.array(rows)


def random_convex_costs(rng: np.random.Generator, max_tokens: int) -> tuple[float, np.ndarray]:
    """``(draft_cost, verify_cost[n-1] for n = 1..max_tokens)``: non-decreasing and convex.

    Slopes are a sorted draw with a run of exact zeros (a flat region, as the measured A800
    profiles have up to ~200 tokens) and repeated values (ties in the increments).
    """
    draft = float(rng.choice([0.0, rng.uniform(0.05, 0.5)]))
    base = float(rng.uniform(0.2, 1.0))
    slopes = np.sort(rng.choice([0.0, 0.0, 0.01, 0.05, rng.uniform(0, 0.3)],
                                size=max_tokens - 1))
    flat = int(rng.integers(0, max_tokens))
    slopes[:flat] = 0.0
    return draft, base + np.concatenate([[0.0], np.cumsum(slopes)])


def theta_by_rebuilding(log_q: np.ndarray, draft: float, verify: np.ndarray, max_budget: int
                        ) -> np.ndarray:
    r""":math:`\theta(B)` for ``B = 0..n`` by rebuilding each tree; ``verify[n-1] = C_v(n)``."""
    sizes, thetas = [], []
    for b in range(max_budget + 1):
        tree = ddtree(log_q, b) if b else DraftTree.root_only()  # B = 0: the root alone
        if sizes and tree.size == sizes[-1]:
            break  # fewer prefixes than b exist
        sizes.append(tree.size)
        thetas.append(surrogate_length(tree, log_q) / (draft + verify[tree.size]))
    return np.array(thetas)


def _instances(rng: np.random.Generator, size: int):
    for _ in range(size):
        lp = random_log_q(rng)
        max_budget = int(rng.integers(1, 25))
        draft, verify = random_convex_costs(rng, max_budget + 1)
        yield lp, draft, verify, max_budget


def greedy_is_exhaustive(rng: np.random.Generator, size: int) -> tuple[int, float]:
    """Convex costs: ``caddtree`` stops at a maximiser of theta over 0..max_budget, and agrees
    with the inline-heap reference. Violation: relative theta gap, or 1 if the trees disagree.

    Gains of a few ulps (a pop with probability ~1e-17 next to N ~ 1) make "the smallest
    maximiser" a matter of rounding: theta computed as N/D, as a rebuilt tree's surrogate, or as
    the reference's running sum can order such near-ties differently. The check therefore
    accepts any stop whose theta is within ``THETA_RTOL`` of the maximum, and requires the two
    implementations to build the same tree up to the shorter of their stops and to stop at
    budgets whose thetas agree within ``THETA_RTOL``.
    """
    worst, n = 0.0, 0
    for lp, draft, verify, max_budget in _instances(rng, 20 * size):
        theta = theta_by_rebuilding(lp, draft, verify, max_budget)
        top = float(theta.max())
        tree = caddtree(lp, draft_cost=draft, verify_cost=lambda k, v=verify: v[k - 1],
                        max_budget=max_budget)
        ref_parent, ref_token = caddtree_heap_reference(lp, draft, lambda k, v=verify: v[k - 1],
                                                        max_budget)
        gap = (top - float(theta[tree.size])) / top
        ref_size = len(ref_parent) - 1
        k = min(tree.size, ref_size) + 1
        same_prefix = (list(tree.parent[:k]) == ref_parent[:k]
                       and list(tree.token[1:k]) == ref_token[1:k])
        if not same_prefix or abs(float(theta[ref_size]) - float(theta[tree.size])) > \
                THETA_RTOL * top:
            gap = max(gap, 1.0)
        worst = max(worst, gap if gap > THETA_RTOL else 0.0)
        n += 1
    return n, worst


def theta_unimodal(rng: np.random.Generator, size: int) -> tuple[int, float]:
    r"""Convex costs: :math:`\theta` rises strictly up to its first maximiser and never exceeds
    it afterwards. Violation: largest relative excess over the running maximum after the peak,
    or largest non-increase before it."""
    worst, n = 0.0, 0
    for lp, draft, verify, max_budget in _instances(rng, 20 * size):
        theta = theta_by_rebuilding(lp, draft, verify, max_budget)
        peak = int(np.argmax(theta))
        before = np.diff(theta[: peak + 1])
        after = theta[peak + 1:] - theta[peak]
        v = max(float(-before.min()) if before.size else 0.0,
                float(after.max()) if after.size else 0.0)
        worst = max(worst, v / float(theta[peak]))
        n += 1
    return n, worst


def nested_trees(rng: np.random.Generator, size: int) -> tuple[int, float]:
    """DDTree's trees are nested: ``ddtree(B)`` is the first ``B`` nodes of ``ddtree(B + 1)``.
    Violation: number of budgets where it fails."""
    bad, n = 0, 0
    for _ in range(size):
        lp = random_log_q(rng, max_depth=5, max_vocab=6)
        prev = DraftTree.root_only()  # B = 0
        for b in range(1, 30):
            tree = ddtree(lp, b)
            k = prev.n_nodes
            if not (np.array_equal(tree.parent[:k], prev.parent)
                    and np.array_equal(tree.token[:k], prev.token)):
                bad += 1
            prev = tree
            n += 1
    return n, float(bad)


def surrogate_concave(rng: np.random.Generator, size: int) -> tuple[int, float]:
    r"""The surrogate gain is discretely concave: pop probabilities never increase,
    :math:`p_{B+1} \le p_B`. Violation: the largest increase."""
    worst, n = 0.0, 0
    for _ in range(10 * size):
        lp = random_log_q(rng, max_depth=5, max_vocab=8)
        tree = ddtree(lp, 200)
        scores = np.zeros(tree.n_nodes)
        for v in range(1, tree.n_nodes):
            scores[v] = scores[tree.parent[v]] + lp[tree.depth[v] - 1, tree.token[v]]
        p = np.exp(scores[1:])
        if p.size > 1:
            worst = max(worst, float(np.diff(p).max()))
        n += 1
    return n, worst


def true_acceptance_not_concave(rng: np.random.Generator, size: int) -> tuple[int, float]:
    r"""Witness: the *true* acceptance :math:`1 + \sum_{i \le B} P(v_i)` need not be concave in
    ``B`` (the target's reach probabilities of the pops are not ordered). Value: the largest
    increase :math:`P(v_{B+1}) - P(v_B)` found; the witness is found if it is > 0."""
    best, n = 0.0, 0
    for _ in range(size):
        lp = random_log_q(rng, max_depth=3, max_vocab=4)
        tree = ddtree(lp, 12)
        # Target rows: the drafter's marginal at that depth, perturbed (a wrong drafter).
        V = lp.shape[1]
        rows = np.empty((tree.n_nodes, V))
        for v in range(tree.n_nodes):
            rows[v] = rng.dirichlet(np.ones(V))
        reach = reach_probabilities(tree, rows)[1:]
        if reach.size > 1:
            best = max(best, float(np.diff(reach).max()))
        n += 1
    return n, best


def longrun_is_dinkelbach(rng: np.random.Generator, size: int) -> tuple[int, float]:
    r"""Convex costs: the long-run rule's budget (add while :math:`p_{B+1} > \lambda\Delta`)
    maximises :math:`N(B) - \lambda D(B)` (smallest maximiser). Violation: objective gap."""
    worst, n = 0.0, 0
    for lp, draft, verify, max_budget in _instances(rng, 10 * size):
        theta = theta_by_rebuilding(lp, draft, verify, max_budget)
        b_max = theta.size - 1
        cost = draft + verify[: b_max + 1]
        tokens = theta * cost
        lam = float(rng.uniform(0.2, 2.0) * theta.max())
        objective = tokens - lam * cost
        p = np.diff(tokens)
        chosen = longrun_budget(p, cost, lam)
        gap = float(objective.max() - objective[chosen])
        if chosen != int(np.argmax(objective)):
            gap = max(gap, 1.0)
        worst = max(worst, gap)
        n += 1
    return n, worst


# ----------------------------------------------------------------- step-cost counterexample
@dataclass(frozen=True)
class StepCounterexample:
    r"""A tiled cost under which CaDDTree's greedy stop is a strict local maximum of
    :math:`\theta`.

    Attributes
    ----------
    log_q : ndarray (L, V)
    cost : TiledCost
    greedy_budget, best_budget : int
        CaDDTree's stop and the smallest global maximiser.
    theta : ndarray
        :math:`\theta(B)` for ``B = 0..best_budget``.
    """

    log_q: np.ndarray
    cost: TiledCost
    greedy_budget: int
    best_budget: int
    theta: np.ndarray

    @property
    def loss(self) -> float:
        """Relative throughput lost by stopping greedily."""
        return float(1.0 - self.theta[self.greedy_budget] / self.theta[self.best_budget])


#: Marginal rows the search tries, simplest first.
_ROWS = {2: [(1, 1), (2, 1), (3, 1)], 3: [(1, 1, 1), (2, 1, 1), (3, 2, 1)],
         4: [(1, 1, 1, 1), (2, 1, 1, 1)]}


def _search_space():
    """(L, V, rows, tile, step) in increasing size: fewer depths, then fewer tokens."""
    for L in (1, 2):
        for V in (2, 3, 4):
            for combo in itertools.product(_ROWS[V], repeat=L):
                lp = np.log(np.array([np.array(r, float) / sum(r) for r in combo]))
                for tile in (2, 3, 4):
                    for step in (0.1, 0.25, 0.5, 0.75, 1.0, 2.0):
                        yield lp, TiledCost(base_s=0.0, slope_s=0.0, tile_tokens=tile,
                                            step_s=step, draft_s=1.0, name="tiled-search",
                                            provenance="proofs_check.budget search")


def find_step_counterexample(tol: float = 1e-9) -> StepCounterexample | None:
    """The smallest instance (by best budget, then search order) where the greedy stop is a
    strict local maximum: :math:`\\theta(B_g) < \\max_B \\theta(B) - ` ``tol``."""
    best: StepCounterexample | None = None
    for lp, cost in _search_space():
        max_budget = sum(lp.shape[1] ** d for d in range(1, lp.shape[0] + 1))  # every prefix
        max_tokens = max_budget + 1
        verify = np.asarray(cost.verify_cost(np.arange(1, max_tokens + 1)))
        theta = theta_by_rebuilding(lp, cost.draft_cost(), verify, max_budget)
        greedy = caddtree(lp, draft_cost=cost.draft_cost(), verify_cost=cost.verify_cost,
                          max_budget=max_budget).size
        top = int(np.argmax(theta))
        if theta[top] - theta[greedy] > tol and (best is None
                                                 or top < best.best_budget):
            best = StepCounterexample(lp, cost, greedy, top, theta[: top + 1])
    return best


def step_counterexample_exists(rng: np.random.Generator, size: int) -> tuple[int, float]:
    """Witness: a tiled cost where the greedy stop loses throughput. Value: the relative loss
    of the smallest instance found (> 0 when found)."""
    found = find_step_counterexample()
    return 1, (found.loss if found is not None else 0.0)


# ----------------------------------------------------------------- one budget across a batch
def batch_instances(rng: np.random.Generator, count: int, *, max_batch: int = 3,
                    max_budget: int = 4):
    """``count`` small batches ``(log_qs, draft, verify, max_budget)``: ``b <= max_batch``
    requests of depth <= 3 and vocabulary <= 3 (ties and exact zeros), one convex cost for the
    batch (``verify[n-1] = C_v(n)`` up to every root and node verified)."""
    for _ in range(count):
        b = int(rng.integers(1, max_batch + 1))
        lps = [random_log_q(rng, max_depth=3, max_vocab=3) for _ in range(b)]
        m = int(rng.integers(1, max_budget + 1))
        draft, verify = random_convex_costs(rng, b * (m + 1))
        yield lps, draft, verify, m


def batch_vector_table(lps: list[np.ndarray], max_budget: int
                       ) -> tuple[np.ndarray, np.ndarray]:
    r"""Every budget vector of a batch and its surrogate tokens, each tree rebuilt.

    Returns ``(vectors, tokens)``: ``vectors`` int (M, b), every ``(B_1..B_b)`` with ``0 <=
    B_i <= min(max_budget, prefixes of request i)``; ``tokens`` float (M,),
    :math:`\sum_i E_q[\tau_i]` of ``ddtree(log_qs[i], B_i)`` (the root alone at 0).
    """
    per = []
    for lp in lps:
        tokens = [1.0]
        for b in range(1, max_budget + 1):
            tree = ddtree(lp, b)
            if tree.size < b:
                break  # fewer prefixes than b exist
            tokens.append(surrogate_length(tree, lp))
        per.append(np.array(tokens))
    vectors = np.array(list(itertools.product(*[range(t.size) for t in per])), dtype=np.int64)
    tokens = sum(t[vectors[:, i]] for i, t in enumerate(per))
    return vectors, np.asarray(tokens, dtype=np.float64)


def batch_union_optimal(rng: np.random.Generator, size: int) -> tuple[int, float]:
    r"""For every total ``N``, the union's first ``N`` pops carry the largest surrogate of all
    budget vectors with :math:`\sum_i B_i = N` (and the union reaches every feasible total).
    Violation: the largest gap, relative to the batch size."""
    worst, n = 0.0, 0
    for lps, draft, verify, m in batch_instances(rng, 20 * size):
        vectors, tokens = batch_vector_table(lps, m)
        curve = batch_budget_curve(lps, draft_cost=draft,
                                   verify_cost=lambda k, v=verify: v[k - 1], max_budget=m)
        totals = vectors.sum(axis=1)
        best = np.array([tokens[totals == t].max() for t in range(int(totals.max()) + 1)])
        union = curve.expected_tokens
        if union.size != best.size:
            worst = max(worst, 1.0)
        else:
            worst = max(worst, float(np.abs(best - union).max()) / len(lps))
        n += 1
    return n, worst


def batch_greedy_is_exhaustive(rng: np.random.Generator, size: int) -> tuple[int, float]:
    r"""Convex costs: ``batch_caddtree``'s trees reach the largest :math:`\theta` over every
    budget vector (enumerated, each tree rebuilt); with one request they are ``caddtree``'s.
    Violation: relative theta gap (beyond ``THETA_RTOL``), or 1 where the trees are not
    ``ddtree`` at their budgets or a single request's tree is not ``caddtree``'s."""
    worst, n = 0.0, 0
    for lps, draft, verify, m in batch_instances(rng, 20 * size):
        cost = lambda k, v=verify: v[k - 1]  # noqa: E731
        vectors, tokens = batch_vector_table(lps, m)
        theta = tokens / (draft + verify[vectors.sum(axis=1) + len(lps) - 1])
        top = float(theta.max())
        trees = batch_caddtree(lps, draft_cost=draft, verify_cost=cost, max_budget=m)
        got = sum(surrogate_length(t, lp) for t, lp in zip(trees, lps, strict=True)) / (
            draft + verify[sum(t.size + 1 for t in trees) - 1])
        gap = (top - got) / top
        worst = max(worst, gap if gap > THETA_RTOL else 0.0)
        for t, lp in zip(trees, lps, strict=True):
            ref = ddtree(lp, t.size) if t.size else DraftTree.root_only()
            if t != ref:
                worst = 1.0
        if len(lps) == 1 and trees[0] != caddtree(lps[0], draft_cost=draft, verify_cost=cost,
                                                 max_budget=m):
            worst = 1.0
        n += 1
    return n, worst


#: The smallest tiled-cost instance of ``docs/theory/batch_caddtree.md``: two requests, one
#: position each with two equally likely tokens; ``C_d = 1``, ``C_v(n) = 0.5 ceil(n / 2)``.
BATCH_STEP_INSTANCE = (
    [np.log(np.array([[0.5, 0.5]])), np.log(np.array([[0.5, 0.5]]))],
    TiledCost(base_s=0.0, slope_s=0.0, tile_tokens=2, step_s=0.5, draft_s=1.0,
              name="tiled-batch-witness", provenance="docs/theory/batch_caddtree.md"),
)


def batch_step_loss(lps: list[np.ndarray], cost: TiledCost, max_budget: int
                    ) -> tuple[float, int, int]:
    """``(relative loss, greedy total, best total)`` of ``batch_caddtree`` against every budget
    vector (enumerated) under ``cost``."""
    vectors, tokens = batch_vector_table(lps, max_budget)
    totals = vectors.sum(axis=1)
    theta = tokens / (cost.draft_cost() + np.asarray(cost.verify_cost(totals + len(lps))))
    trees = batch_caddtree(lps, draft_cost=cost.draft_cost(), verify_cost=cost.verify_cost,
                           max_budget=max_budget)
    greedy = sum(t.size for t in trees)
    got = sum(surrogate_length(t, lp) for t, lp in zip(trees, lps, strict=True)) / (
        cost.draft_cost() + float(cost.verify_cost(greedy + len(lps))))
    best = int(totals[int(np.argmax(theta))])
    return float(1.0 - got / theta.max()), greedy, best


def batch_step_counterexample(rng: np.random.Generator, size: int) -> tuple[int, float]:
    """Witness: a tiled cost where the batch's greedy stop loses throughput to the best budget
    vector. Value: the relative loss on :data:`BATCH_STEP_INSTANCE` (1/6)."""
    lps, cost = BATCH_STEP_INSTANCE
    return 1, batch_step_loss(lps, cost, 4)[0]
