r"""Baselines for a batch's trees, beside :func:`~treespec_sim.policies.batch_caddtree`.

Every function here sizes the ``b`` trees of one verification pass; what they are compared on
is the batch's surrogate throughput (:func:`batch_theta`),

.. math:: \theta = \frac{\sum_i E_q[\tau_i]}{C_d + C_v\bigl(\sum_i (B_i + 1)\bigr)},

the objective ``batch_caddtree`` maximises over every budget vector under a convex cost
(``docs/theory/batch_caddtree.md``):

:func:`fixed_budget_trees`
    one budget ``B`` for every request (what an engine's single setting does).
:func:`independent_caddtree`
    each request's own CaDDTree, priced at its share of the batch: the draft split evenly and
    the pass priced as if every request had its tree's size, ``C_v(b n) / b`` for ``n`` query
    tokens of its own, so each added node pays the batch's marginal cost per token.
:func:`tetris_chains`
    TETRIS (arXiv 2502.15197): chains only, the batch's draft tokens picked greedily by
    their acceptance probability (the chain prefix's surrogate) under a total capacity; without
    a capacity, stopped by CaDDTree's rule on the batch's cost.
:func:`best_fixed_budget`
    the one budget that would have been best with hindsight over a stream of batches of one
    size (what CAST's tables and vLLM's per-batch-size schedule aim at).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..cost import VerifyCost
from ..paths import LogQ, path_probabilities
from ..surrogate import surrogate_length
from ..tree import DraftTree
from ..validation import (
    check_budget,
    check_log_qs,
    check_nonnegative_int,
    check_real,
    check_root_tokens,
)
from ._caddtree import caddtree, first_non_increase, merge_candidates
from ._chain import chain
from ._ddtree import build_nodes as _ddtree_build
from ._ddtree import trusted_tree as _ddtree_tree

__all__ = ["FixedBudgetChoice", "batch_theta", "best_fixed_budget", "fixed_budget_trees",
           "independent_caddtree", "surrogate_tau_curves", "tetris_chains"]


def _ddtrees(log_qs, budget: int, root_tokens) -> tuple[list[DraftTree], list[np.ndarray]]:
    """Each request's DDTree at ``budget`` and its checked array."""
    checked = check_log_qs(log_qs)
    roots = check_root_tokens(root_tokens, [lp.shape[1] for lp, _ in checked])
    trees = [_ddtree_tree(*_ddtree_build(lp, budget), root)
             for (lp, _), root in zip(checked, roots, strict=True)]
    return trees, [lp for lp, _ in checked]


def batch_theta(trees, log_qs, *, draft_cost: float, verify_cost: VerifyCost) -> float:
    r"""The batch's surrogate tokens per second with these trees:
    :math:`\sum_i (1 + \sum_{u \in T_i} q_i(u)) / (C_d + C_v(\sum_i (B_i + 1)))`.

    Parameters
    ----------
    trees : sequence of DraftTree, length b
    log_qs : sequence of array_like, each (L_i, V_i)
        The requests' drafter log-probabilities, in the same order.
    draft_cost, verify_cost
        As :func:`~treespec_sim.policies.batch_caddtree`.
    """
    checked = check_log_qs(log_qs)
    if len(trees) != len(checked):
        raise ValueError(f"trees ({len(trees)}) and log_qs ({len(checked)}) must have one entry "
                         "per request")
    tokens = sum(surrogate_length(t, lp) for t, (lp, _) in zip(trees, checked, strict=True))
    n = sum(t.size + 1 for t in trees)
    seconds = check_real(draft_cost, "draft_cost") + float(np.asarray(verify_cost(n)))
    if not seconds > 0:
        raise ValueError(f"draft_cost + verify_cost({n}) must be > 0 (a round takes time)")
    return float(tokens / seconds)


def fixed_budget_trees(log_qs, budget: int, *, root_tokens=None) -> list[DraftTree]:
    """``ddtree(log_qs[i], budget)`` for every request: one budget for all."""
    trees, _ = _ddtrees(log_qs, check_budget(budget), root_tokens)
    return trees


def independent_caddtree(log_qs, *, draft_cost: float, verify_cost: VerifyCost,
                         max_budget: int, root_tokens=None) -> list[DraftTree]:
    r"""Each request's own :func:`~treespec_sim.policies.caddtree` at the batch's marginal
    cost: draft cost :math:`C_d / b` and verification cost :math:`C_v(b\,n) / b` for its ``n``
    query tokens (its share of a pass in which every request had its size). With one request
    it is ``caddtree``; arguments as :func:`~treespec_sim.policies.batch_caddtree`."""
    checked = check_log_qs(log_qs)
    b = len(checked)
    roots = check_root_tokens(root_tokens, [lp.shape[1] for lp, _ in checked])
    share = check_real(draft_cost, "draft_cost") / b
    if not callable(verify_cost):
        raise ValueError("verify_cost must be a callable n_tokens -> seconds")

    def per_request(n):
        return np.asarray(verify_cost(b * np.asarray(n)), dtype=np.float64) / b

    return [caddtree(lp, draft_cost=share, verify_cost=per_request, max_budget=max_budget,
                     root_token=root) for (lp, _), root in zip(checked, roots, strict=True)]


def tetris_chains(log_qs, *, draft_cost: float, verify_cost: VerifyCost,
                  max_length: int | None = None, capacity: int | None = None,
                  root_tokens=None) -> list[DraftTree]:
    """TETRIS-style chains: every request drafts its argmax chain; the batch's draft tokens
    are taken best first across the requests by their chain prefix's surrogate probability
    (a prefix of each chain).

    Parameters
    ----------
    log_qs, draft_cost, verify_cost, root_tokens
        As :func:`~treespec_sim.policies.batch_caddtree`.
    max_length : int, optional
        Longest chain per request (default: each request's depth ``L_i``).
    capacity : int, optional
        Draft tokens verified in all (TETRIS's capacity; ``0``: none). Default: stop by
        CaDDTree's rule on the batch's cost, as ``batch_caddtree`` does over trees.

    Returns
    -------
    list of DraftTree
        Request ``i``'s chain of ``B_i`` nodes.
    """
    checked = check_log_qs(log_qs)
    roots = check_root_tokens(root_tokens, [lp.shape[1] for lp, _ in checked])
    length = None if max_length is None else check_budget(max_length, "max_length")
    chains = [chain(lp, length, root_token=root)
              for (lp, _), root in zip(checked, roots, strict=True)]
    pops = [path_probabilities(c, lp) for c, (lp, _) in zip(chains, checked, strict=True)]
    curve = merge_candidates(chains, pops, draft_cost=draft_cost, verify_cost=verify_cost)
    if capacity is None:
        return curve.trees_at(first_non_increase(curve.theta))
    return curve.trees_at(min(check_nonnegative_int(capacity, "capacity"), curve.p.size))


def surrogate_tau_curves(log_qs: list[LogQ], max_budget: int) -> tuple[np.ndarray, np.ndarray]:
    """Each request's surrogate tokens per round and nodes at every budget ``0..max_budget``.

    Returns
    -------
    tau : ndarray, shape (b, max_budget + 1)
        ``1 + sum of the first B pops`` (flat past the request's last prefix).
    nodes : ndarray of int64, shape (b, max_budget + 1)
        ``min(B, prefixes)``: the nodes ``ddtree(log_q, B)`` has.
    """
    max_budget = check_budget(max_budget, "max_budget")
    trees, lps = _ddtrees(log_qs, max_budget, None)
    b = len(trees)
    tau = np.ones((b, max_budget + 1))
    nodes = np.zeros((b, max_budget + 1), dtype=np.int64)
    for i, (t, lp) in enumerate(zip(trees, lps, strict=True)):
        gains = np.cumsum(path_probabilities(t, lp))
        k = np.minimum(np.arange(max_budget + 1), t.size)
        tau[i] = 1.0 + np.concatenate([[0.0], gains])[k]
        nodes[i] = k
    return tau, nodes


@dataclass(frozen=True)
class FixedBudgetChoice:
    """The best fixed budget with hindsight (:func:`best_fixed_budget`).

    Attributes
    ----------
    budget : int
        The budget with the most tokens per second over the batches (the smallest on ties).
    tokens_per_s : float
        Its tokens per second: all batches' expected tokens over all their seconds.
    budgets : tuple of int
        Every budget compared.
    rates : tuple of float
        Tokens per second of each.
    """

    budget: int
    tokens_per_s: float
    budgets: tuple[int, ...]
    rates: tuple[float, ...]


def best_fixed_budget(tau_curves, *, draft_cost: float, verify_cost: VerifyCost, budgets,
                      node_counts=None) -> FixedBudgetChoice:
    r"""The one budget for every request of every batch that, with hindsight, gives a stream
    of batches of one size the most tokens per second.

    Over batches ``j`` of ``b`` requests, budget ``B`` yields
    :math:`\sum_j \sum_i \tau_{j,i}(B) / \sum_j \bigl(C_d + C_v(\sum_i (n_{j,i}(B) + 1))\bigr)`:
    the stream's long-run rate (tokens over seconds, not a mean of per-batch rates).

    Parameters
    ----------
    tau_curves : sequence of array_like, each shape (b, K + 1)
        Per batch, each request's expected tokens per round at budget ``0..K``: the
        surrogate's (:func:`surrogate_tau_curves`) or the target's (``Round.tau_curve`` of a
        nested round).
    draft_cost, verify_cost
        The batch's costs (one batch size: every batch has the same ``b``).
    budgets : sequence of int
        The budgets compared (each ``<= K``).
    node_counts : sequence of array_like, each (b, K + 1), optional
        Nodes each request's tree has at each budget (default ``B``: every request has at
        least ``K`` prefixes).

    Returns
    -------
    FixedBudgetChoice
    """
    curves = [np.asarray(t, dtype=np.float64) for t in tau_curves]
    if not curves:
        raise ValueError("tau_curves must hold at least one batch")
    if any(c.ndim != 2 for c in curves):
        raise ValueError("tau_curves: each batch's curves must be an array (b, K + 1)")
    b, width = curves[0].shape
    if any(c.shape != (b, width) for c in curves):
        raise ValueError(f"tau_curves: every batch must have the same shape (b, K + 1) = "
                         f"{(b, width)} (one batch size per call)")
    budgets = tuple(check_nonnegative_int(x, "budgets[]") for x in budgets)
    if not budgets or max(budgets) >= width:
        raise ValueError(f"budgets must be a non-empty sequence of budgets <= K = {width - 1}; "
                         f"got {budgets}")
    if node_counts is None:
        nodes = [np.broadcast_to(np.arange(width), (b, width)) for _ in curves]
    else:
        nodes = [np.asarray(n, dtype=np.int64) for n in node_counts]
        if len(nodes) != len(curves) or any(n.shape != (b, width) for n in nodes):
            raise ValueError("node_counts must match tau_curves, one (b, K + 1) array per batch")
    cd = check_real(draft_cost, "draft_cost")
    rates = []
    for B in budgets:
        tokens = sum(float(c[:, B].sum()) for c in curves)
        seconds = sum(cd + float(np.asarray(verify_cost(int(n[:, B].sum()) + b)))
                      for n in nodes)
        rates.append(tokens / seconds)
    best = int(np.argmax(rates))
    return FixedBudgetChoice(budgets[best], rates[best], budgets, tuple(rates))

