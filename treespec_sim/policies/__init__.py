"""Tree builders (policies): from drafter log-marginals to a :class:`~treespec_sim.DraftTree`.

Every builder has the shape ``builder(log_q, budget, *, root_token) -> DraftTree`` when used
through :func:`get_policy`, so the engine and the sweep can treat them alike.
"""

from __future__ import annotations

from collections.abc import Callable

from ..tree import DraftTree
from .caddtree import (
    CaDDTreePolicy,
    LongRunPolicy,
    budget_curve,
    caddtree,
    exhaustive_budget_tree,
    longrun_tree,
)
from .chain import chain
from .ddtree import ddtree, ddtree_with_mask

__all__ = ["POLICIES", "CaDDTreePolicy", "LongRunPolicy", "budget_curve", "caddtree", "chain",
           "ddtree", "ddtree_with_mask", "exhaustive_budget_tree", "get_policy", "longrun_tree"]

PolicyFn = Callable[..., DraftTree]


def _chain_policy(log_q, budget: int, *, root_token: int = -1) -> DraftTree:
    # The DFlash chain always spends L nodes; a smaller budget truncates it.
    return chain(log_q, budget, root_token=root_token)


#: Deterministic tree builders by name: ``fn(log_q, budget, *, root_token) -> DraftTree``.
POLICIES: dict[str, PolicyFn] = {
    "chain": _chain_policy,
    "ddtree": ddtree,
}


def get_policy(name: str) -> PolicyFn:
    """Look up a policy by name; an unknown name lists the known ones."""
    try:
        return POLICIES[name]
    except KeyError:
        raise ValueError(f"unknown policy {name!r}; known policies: "
                         f"{', '.join(sorted(POLICIES))}") from None
