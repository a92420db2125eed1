r"""Tsubame (reconstruction): plan a tree's shape from draft scores, then fill it by sampling.

Only Tsubame's abstract is public; this follows the reconstruction in ``docs/theory/tsubame.md``
§1:

* **pass 1 (plan)**: DDTree's best-first heap over the drafter's marginals gives a tree; only its
  *shape* (how many children each node has) is kept, its tokens are discarded;
* **pass 2 (fill)**: every node's children are fresh draws from that node's proposal -- the
  depth's marginal, or a conditional correction given the sampled parent -- i.i.d. or without
  replacement, in draw order (:func:`~treespec_sim.policies.sampled.fill_tree`);
* verification with the rule that matches the draws: ``"rrs"`` for i.i.d., ``"rrsw"``,
  ``"traversal"`` or ``"univer"`` without replacement.

Planners (the score the heap uses):

``"ddtree"``
    the drafter's own marginals, as DDTree.
``"tempered"``
    the marginals tempered to the sampling temperature, i.e. the laws pass 2 will actually draw
    from (sharper at ``T < 1``, flatter at ``T > 1``); identical to ``"ddtree"`` at ``T = 1``.

At ``T = 0`` pass 2 degenerates to the top-``k`` tokens of each proposal, so with marginal
proposals Tsubame *is* DDTree (verify with ``"follow"``).
"""

from __future__ import annotations

import numpy as np

from ..paths import LogQ
from ..tree import DraftTree
from ..validation import check_budget, check_log_q, check_temperature
from ._ddtree import ddtree
from .sampled import ProposalFn, SampledDraft, fill_tree, marginal_proposal

__all__ = ["PLANNERS", "tsubame", "tsubame_shape"]

PLANNERS = ("ddtree", "tempered")


def tsubame_shape(log_q: LogQ, budget: int, *, planner: str = "ddtree", temperature: float = 1.0,
                  root_token: int = -1) -> DraftTree:
    """Pass 1: DDTree's tree at ``budget`` (on the planner's scores) with the tokens erased.

    The result is a shape: ``parent`` and child counts only (tokens set to 0, root kept); it
    depends on draft-side information only (condition C1). A
    :class:`~treespec_sim.marginals.LazyLogMarginals` goes to DDTree as is (ranked, not
    materialised) unless the ``"tempered"`` planner has to rescale it.
    """
    if not isinstance(planner, str) or planner not in PLANNERS:
        raise ValueError(f"planner must be one of {PLANNERS}; got {planner!r}")
    temperature = check_temperature(temperature)
    lp = log_q  # ddtree validates it, and ranks a LazyLogMarginals without materialising it
    if planner == "tempered" and temperature > 0 and temperature != 1.0:
        arr, _ = check_log_q(log_q)
        z = arr.astype(np.float64) / float(temperature)
        lp = z - np.logaddexp.reduce(z, axis=1, keepdims=True)
    plan = ddtree(lp, check_budget(budget), root_token=root_token)  # ddtree checks the token
    return DraftTree.from_parents_multiset(plan.parent, [plan.root_token] + [0] * plan.size)


def tsubame(log_q: LogQ, budget: int, *, rng: np.random.Generator,
            scheme: str = "without_replacement", temperature: float = 1.0,
            proposal: ProposalFn | None = None, planner: str = "ddtree",
            root_token: int = -1, proposal_temperature: float | None = None) -> SampledDraft:
    r"""Tsubame's two passes: plan a shape from ``log_q``, fill it with fresh draws.

    Parameters
    ----------
    log_q : array_like, shape (L, V)
        Drafter log-marginals (the planner's input, and the default proposal).
    budget : int
        Nodes in the plan. Without replacement, a node planned wider than its proposal's support
        gets fewer children (the tree can end up smaller).
    rng : numpy.random.Generator
        Pass-2 randomness (never reused from pass 1, which has none here).
    scheme : {"without_replacement", "iid", "greedy"}
    temperature : float
        Sampling temperature (the proposal is tempered to it; the target's temperature must be
        the same for the verifier's ratio to be the exact law drawn from -- the caller's
        responsibility, as in any engine). ``0``: deterministic top-k fill, verify with
        ``"follow"``.
    proposal : ProposalFn, optional
        ``proposal(depth, parent_token)``; default: the marginals of ``log_q``.
    planner : {"ddtree", "tempered"}
    root_token : int
    proposal_temperature : float, optional
        Pass 2 draws from the proposal tempered to this instead of ``temperature`` (a sharper
        or flatter sampling law with the same ranking: the plan is unchanged;
        :func:`~treespec_sim.policies.sampled.fill_tree`). Default: ``temperature``.

    Returns
    -------
    SampledDraft
        Tree, exact proposal rows (a :class:`~treespec_sim.proposal.ProposalRows` with
        one law per depth for the default marginal proposal, per ``(depth, parent token)`` for
        a conditional one; None at ``T = 0``), scheme and temperature; its
        ``verify``/``expected_length`` refuse a rule that does not match the draws.
    """
    shape = tsubame_shape(log_q, budget, planner=planner, temperature=temperature,
                          root_token=root_token)
    fn = marginal_proposal(log_q) if proposal is None else proposal
    return fill_tree(shape, fn, scheme=scheme, rng=rng, temperature=temperature,
                     proposal_temperature=proposal_temperature)
