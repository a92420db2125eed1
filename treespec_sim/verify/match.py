r"""Sample-and-match with thresholds: SGLang's target-only tree sampling.

SGLang verifies its trees at ``T > 0`` with ``TreeSpeculativeSamplingTargetOnly``
(``sgl-kernel/csrc/speculative/speculative_sampling.cuh``; also what its open DDTree port uses
for non-greedy requests, SGLang PR #29907). It reads the *target* probabilities only, never the
drafter's: at each node, one uniform :math:`u`; the children are walked in sibling order with a
running sum :math:`c_i = \sum_{j \le i} p(x_j)` of their target probabilities, and child ``i``
is accepted, and the walk descends into it, at the first ``i`` where

.. math:: u \le c_i / t_{acc} \quad\text{or}\quad p(x_i) \ge t_{single};

if no child is accepted, the bonus is drawn from the target row with the tried children's
tokens removed (``relu(target - draft_probs)``, where a rejected child's entry of
``draft_probs`` was set to its target probability). SpecInfer calls it naive sampling.

With both thresholds at 1 (``--speculative-accept-threshold-single`` and
``--speculative-accept-threshold-acc``, SGLang's defaults) this is inverse-CDF sampling of the
target over the children first: the walk accepts child ``i`` with probability exactly
:math:`p(x_i)` and emits consecutive exact target draws, so it is lossless on any tree with
distinct sibling tokens whose tokens were fixed before the target was read, with the law of
predraw-and-follow (``"follow"``; :math:`E[\tau] = 1 + C_p`). Duplicate sibling tokens (i.i.d.
draws) are counted twice in the running sum: lossy. Below 1 either threshold accepts more
than the target allows: lossy by design, and the bias is what the rule table's lossy rows
report. As a node step of :mod:`.walk`: with
:math:`A_i = 1` if some :math:`j \le i` has :math:`p(x_j) \ge t_{single}`, else
:math:`\min(1, c_i / t_{acc})`, child ``i`` is taken with probability :math:`A_i - A_{i-1}`
and the bonus law applies with probability :math:`1 - A_k`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..rows import TargetOracle
from ..tree import DraftTree
from ..validation import is_number
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

__all__ = ["MatchThresholds", "match_expected_length", "match_first_token_law",
           "match_round_law", "match_sample", "match_step"]

#: SGLang caps ``threshold_acc`` from below before dividing by it.
ACC_FLOOR = 1e-9


@dataclass(frozen=True)
class MatchThresholds:
    """SGLang's two acceptance thresholds, each in ``[0, 1]`` (1: lossless).

    Attributes
    ----------
    single : float
        ``--speculative-accept-threshold-single``: accept a child whose target probability is at
        least this.
    acc : float
        ``--speculative-accept-threshold-acc``: accept when the node's uniform is at most the
        running target sum divided by this (floored at :data:`ACC_FLOOR`, as SGLang does).
    """

    single: float = 1.0
    acc: float = 1.0

    def __post_init__(self) -> None:
        for name in ("single", "acc"):
            x = getattr(self, name)
            if not is_number(x, numpy=False) or not (math.isfinite(x) and 0.0 <= x <= 1.0):
                raise ValueError(f"threshold {name} must be a number in [0, 1]; got {x!r}")
            object.__setattr__(self, name, float(x))

    @property
    def lossless(self) -> bool:
        """Both thresholds at 1."""
        return self.single == 1.0 and self.acc == 1.0

    @property
    def label(self) -> str:
        """``"single=0.5,acc=1"`` (only the thresholds below 1)."""
        parts = [f"{n}={getattr(self, n):g}" for n in ("single", "acc") if getattr(self, n) < 1]
        return ",".join(parts)


def match_step(tree: DraftTree, oracle: TargetOracle, thresholds: MatchThresholds) -> StepFn:
    """The node step of sample-and-match (see the module docstring)."""
    acc = max(thresholds.acc, ACC_FLOOR)

    def step(v: int) -> NodeStep:
        p = np.asarray(oracle.row(v), dtype=np.float64)
        kids = tree.children(v)
        mass = p[tree.token[kids]]
        reach = np.minimum(1.0, np.cumsum(mass) / acc)
        sure = np.flatnonzero(mass >= thresholds.single)
        if sure.size:
            reach[sure[0]:] = 1.0
        accept = np.diff(reach, prepend=0.0)
        resid = p.copy()
        resid[tree.token[kids]] = 0.0
        return make_step(accept, resid, v)

    return step


def match_sample(tree: DraftTree, oracle: TargetOracle, rng: np.random.Generator, *,
                 thresholds: MatchThresholds = MatchThresholds()) -> Outcome:
    """One round of sample-and-match."""
    return walk_sample(tree, match_step(tree, oracle, thresholds), rng)


def match_round_law(tree: DraftTree, oracle: TargetOracle, *,
                    thresholds: MatchThresholds = MatchThresholds()
                    ) -> dict[tuple[int, ...], float]:
    """Exact law of the emitted tokens for the fixed tree."""
    return walk_round_law(tree, match_step(tree, oracle, thresholds))


def match_expected_length(tree: DraftTree, oracle: TargetOracle, *,
                          thresholds: MatchThresholds = MatchThresholds()) -> float:
    r"""Exact :math:`E[\tau]` over the node uniforms and the bonus draw."""
    return walk_expected_length(tree, match_step(tree, oracle, thresholds))


def match_first_token_law(tree: DraftTree, oracle: TargetOracle, *,
                          thresholds: MatchThresholds = MatchThresholds()) -> np.ndarray:
    """Exact law of the first emitted token, float64 (V,)."""
    return walk_first_token_law(tree, match_step(tree, oracle, thresholds), oracle.shape[1])
