r"""The per-child ratio rule on a top-k tree: ``min(1, p/q)`` in sibling order (lossy).

What a port that knows speculative sampling for one draft writes for a tree: at each node, walk
the children in sibling order and accept child :math:`x_i` with probability
:math:`\min(1, p(x_i)/q(x_i))` -- the target row :math:`p` and the drafter's row :math:`q` at
the node, the same for every sibling -- descending into the first accepted child; if every
child is rejected, draw the bonus from :math:`\mathrm{norm}((p - q)_+)`. On a deterministic
top-k tree it is biased twice over: the children were *chosen* as the top tokens of
:math:`q`, not drawn from it, and every sibling is judged against the untouched :math:`p` and
:math:`q` instead of a chained residual. An apparent +20% in accepted length from such a rule
became a net loss under an exact verifier (warpfront/hipfire PR #483). The chained-residual
variant (RRSw run on top-k children) is the known pitfall
``caught[soft_q_on_deterministic_drafts]``; this one is ``caught[sibling_order_ratio]``.

It is in the rule table as a *lossy* rule (never a method's rule, never in a lossless row) so
that its apparent :math:`E[\tau]` and its bias can be measured beside the exact rules. As a
node step of :mod:`.walk`: child ``i`` is taken with probability
:math:`a_i \prod_{j<i}(1 - a_j)`, :math:`a_i = \min(1, p(x_i)/q(x_i))`.
"""

from __future__ import annotations

import numpy as np

from ..rows import TargetOracle
from ..tree import DraftTree
from .outcome import Outcome
from .walk import (
    NodeStep,
    StepFn,
    make_step,
    walk_expected_length,
    walk_first_token_law,
    walk_round_law,
    walk_sample,
)

__all__ = ["ratio_expected_length", "ratio_first_token_law", "ratio_round_law", "ratio_sample",
           "ratio_step"]


def ratio_step(tree: DraftTree, oracle: TargetOracle, proposal) -> StepFn:
    """The node step of the per-child ratio rule (see the module docstring)."""

    def step(v: int) -> NodeStep:
        p = np.asarray(oracle.row(v), dtype=np.float64)
        kids = tree.children(v)
        if kids.size == 0:
            return make_step(np.zeros(0), p, v)
        q = np.asarray(proposal[v], dtype=np.float64)
        x = tree.token[kids]
        a = np.minimum(1.0, p[x] / q[x])
        reach = np.concatenate(([1.0], np.cumprod(1.0 - a)[:-1]))
        return make_step(reach * a, np.maximum(p - q, 0.0), v)

    return step


def ratio_sample(tree: DraftTree, oracle: TargetOracle, rng: np.random.Generator,
                 proposal) -> Outcome:
    """One round of the per-child ratio rule."""
    return walk_sample(tree, ratio_step(tree, oracle, proposal), rng)


def ratio_round_law(tree: DraftTree, oracle: TargetOracle, proposal
                    ) -> dict[tuple[int, ...], float]:
    """Exact law of the emitted tokens for the fixed tree."""
    return walk_round_law(tree, ratio_step(tree, oracle, proposal))


def ratio_expected_length(tree: DraftTree, oracle: TargetOracle, proposal) -> float:
    r"""Exact (apparent) :math:`E[\tau]`."""
    return walk_expected_length(tree, ratio_step(tree, oracle, proposal))


def ratio_first_token_law(tree: DraftTree, oracle: TargetOracle, proposal) -> np.ndarray:
    """Exact law of the first emitted token, float64 (V,)."""
    return walk_first_token_law(tree, ratio_step(tree, oracle, proposal), oracle.shape[1])
